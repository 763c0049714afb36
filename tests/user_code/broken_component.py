"""A team's component module that fails as it is imported: its source reads fine at validation,
and the build names the entry when the import raises."""

from tfx.dsl.component.experimental.annotations import InputArtifact
from tfx.dsl.component.experimental.decorators import component
from tfx.types import standard_artifacts

raise RuntimeError("the team's module is broken on purpose")


@component
def Broken(examples: InputArtifact[standard_artifacts.Examples]) -> None:  # noqa: N802
    """Never defined: the module raises before."""
    del examples
