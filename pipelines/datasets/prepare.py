"""`conveyor data NAME`: writes a pipeline's input CSV from a file an installed package ships.

Nothing is downloaded. Missing values are written as empty fields, which TFX's CSV decoding
reads as absent features (a literal "NA" would turn a numeric column into a string column).
"""

from __future__ import annotations

import filecmp
import importlib.util
from pathlib import Path

from pipelines.core.object_path import ObjectPath
from pipelines.spec import expressions
from pipelines.spec.models import PipelineSpec


class DataPreparationError(ValueError):
    """The spec's `data.prepare` section cannot produce the input CSV."""


def packaged_file(package: str, relative_path: str) -> Path:
    """The file at `relative_path` inside the installed `package` (`data.prepare.package` and
    `.path`): how a spec names its source data without a download or a machine-specific path.

    Raises:
      DataPreparationError: the package is not installed or holds no such file.
    """
    found = importlib.util.find_spec(package)
    if found is None or not found.submodule_search_locations:
        raise DataPreparationError(f"data.prepare.package: package {package!r} is not installed.")
    path = Path(next(iter(found.submodule_search_locations))) / relative_path
    if not path.is_file():
        raise DataPreparationError(
            f"data.prepare.path: {relative_path!r} is not a file in package {package!r} ({path})."
        )
    return path


def prepare(spec: PipelineSpec, input_dir: Path, target: Path | None = None) -> Path:
    """Writes `data.prepare` of the spec to `target` (default: `input_dir/<filename>`);
    returns the CSV written."""
    import pandas as pd

    recipe = spec.data.prepare
    if recipe is None:
        raise DataPreparationError(
            f"{spec.name}: the spec has no data.prepare section; put CSV files in "
            f"{spec.data.input_dir} yourself."
        )
    source = packaged_file(recipe.package, recipe.path)
    # The whole file, then the first rows: each column keeps the type it has in the whole file
    # (an integer column with a missing value further down stays a float column), so a sample
    # matches the curated schema the full data does.
    frame = pd.read_csv(source)
    if recipe.rows is not None:
        frame = frame.head(recipe.rows)
    for column, expression in recipe.derive.items():
        try:
            # Not DataFrame.eval: it resolves attributes and `@` locals, so a spec could run code.
            derived = expressions.evaluate(expression, frame)
        except expressions.ExpressionError as err:
            raise DataPreparationError(
                f"data.prepare.derive.{column}: {err} (over {source})"
            ) from None
        frame[column] = derived.astype(int) if derived.dtype == bool else derived
    if recipe.columns:
        missing = [c for c in recipe.columns if c not in frame.columns]
        if missing:
            raise DataPreparationError(
                f"data.prepare.columns: {missing} not in {source} "
                f"(columns: {', '.join(frame.columns)})."
            )
        frame = frame[list(recipe.columns)]
    target = target or input_dir / recipe.filename
    if isinstance(target, ObjectPath):
        data = frame.to_csv(index=False).encode()
        # Same bytes: keep the object and its generation, which the input fingerprint includes.
        if not (target.is_file() and target.read_bytes() == data):
            target.write_bytes(data)  # an object appears whole, when its upload completes
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    frame.to_csv(partial, index=False)
    if target.exists() and filecmp.cmp(partial, target, shallow=False):
        # Same bytes: keep the existing file and its modification time, which ExampleGen's
        # input fingerprint includes, so preparing again does not make the next run retrain.
        partial.unlink()
        return target
    partial.replace(target)  # A reader never sees a half-written CSV.
    return target
