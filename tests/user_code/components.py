"""A team's own TFX components, as the tests' specs name them in `components[]` by import path.

Validation reads them from this source without importing it; only a pipeline build imports
them (and TFX with them).
"""

import os

from tfx.dsl.component.experimental.annotations import (
    InputArtifact,
    OutputArtifact,
    OutputDict,
    Parameter,
)
from tfx.dsl.component.experimental.decorators import component
from tfx.dsl.components.base import base_component, base_executor, executor_spec
from tfx.types import standard_artifacts
from tfx.types.component_spec import ChannelParameter, ComponentSpec, ExecutionParameter

EXAMPLES_KEY = "examples"

# An alias is valid Python, but only running the module says what it stands for.
ExamplesIn = InputArtifact[standard_artifacts.Examples]


def _has_value(feature) -> bool:
    return bool(feature.bytes_list.value or feature.float_list.value or feature.int64_list.value)


@component
def DropMissing(  # noqa: N802 - TFX names components like classes
    examples: InputArtifact[standard_artifacts.Examples],
    kept: OutputArtifact[standard_artifacts.Examples],
    column: Parameter[str],
    min_rows: Parameter[int] = 1,
) -> OutputDict(dropped=int):
    """Copies the examples of every split without the rows that have no value in `column`;
    fails when a split keeps fewer than `min_rows`. Returns how many rows it dropped."""
    import tensorflow as tf
    from tfx.components.util import examples_utils
    from tfx.types import artifact_utils

    kept.split_names = examples.split_names
    kept.span = examples.span
    kept.version = examples.version
    examples_utils.set_payload_format(kept, examples_utils.get_payload_format(examples))
    dropped = 0
    for split in artifact_utils.decode_split_names(examples.split_names):
        source = artifact_utils.get_split_uri([examples], split)
        target = artifact_utils.get_split_uri([kept], split)
        tf.io.gfile.makedirs(target)
        files = sorted(tf.io.gfile.glob(os.path.join(source, "*")))
        rows = 0
        output = os.path.join(target, "data_tfrecord-00000-of-00001.gz")
        with tf.io.TFRecordWriter(output, options="GZIP") as writer:
            for record in tf.data.TFRecordDataset(files, compression_type="GZIP"):
                serialized = record.numpy()
                feature = tf.train.Example.FromString(serialized).features.feature.get(column)
                if feature is None or not _has_value(feature):
                    dropped += 1
                    continue
                writer.write(serialized)
                rows += 1
        if rows < min_rows:
            raise ValueError(f"split {split}: {rows} rows kept, fewer than min_rows {min_rows}")
    return {"dropped": dropped}


@component
def CountRows(  # noqa: N802
    statistics: InputArtifact[standard_artifacts.ExampleStatistics],
    label: Parameter[str] = "",
) -> OutputDict(rows=int):
    """Returns the rows the statistics counted (a value output, an Integer artifact)."""
    del statistics, label
    return {"rows": 0}


@component
def AliasedInput(  # noqa: N802
    examples: ExamplesIn,
) -> None:
    """An input whose annotation is an alias: TFX resolves it at import, ast cannot."""
    del examples


class FilterExamplesSpec(ComponentSpec):
    """A class component's spec: its inputs, outputs and parameters, as TFX declares them."""

    PARAMETERS = {
        "min_rows": ExecutionParameter(type=int),
        "column": ExecutionParameter(type=str, optional=True),
    }
    INPUTS = {
        EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples),
        "schema": ChannelParameter(type=standard_artifacts.Schema, optional=True),
    }
    OUTPUTS = {"filtered": ChannelParameter(type=standard_artifacts.Examples)}


class FilterExamplesExecutor(base_executor.BaseExecutor):
    """Does nothing: the class component is only built (and read), never run, by the tests."""

    def Do(self, input_dict, output_dict, exec_properties):  # noqa: N802 - TFX's name
        """Nothing to do."""


class FilterExamples(base_component.BaseComponent):
    """A class component that keeps BaseComponent's `__init__(spec)`."""

    SPEC_CLASS = FilterExamplesSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(FilterExamplesExecutor)
