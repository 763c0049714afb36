"""TFX's StatisticsGen executor, reading the Arrow reader's Parquet copy of the examples.

Most of what StatisticsGen costs on a big span is not TFDV: it is reading gzipped TFRecords in
Python and decoding every tf.Example back into Arrow (about 40 of 47 s at 1.5M taxi rows on two
cores; TFDV's own generators took about 4). The Arrow CSV reader already had those rows in
Arrow, and writes them as Parquet beside the tf.Examples in exactly the layout the decoder would
produce (components/arrow_example_gen). When an Examples artifact says that copy is complete,
this executor hands TFX's own executor a view of the artifact whose splits are the Parquet files,
so TFX's code reads them with tfx_bsl's Parquet TFXIO and TFDV computes the same statistics.

Everything else is TFX's: options, excluded splits, sample rates, the schema input, the output
artifact and its properties. Examples without the copy (TFX's CsvExampleGen, a copy removed
since) are read as TFX reads them.
"""

from __future__ import annotations

import glob
import json
import os

from absl import logging
from ml_metadata.proto import metadata_store_pb2
from tfx.components.statistics_gen import executor as statistics_gen_executor
from tfx.components.util import examples_utils
from tfx.proto import example_gen_pb2
from tfx.types import artifact, artifact_utils, standard_artifacts, standard_component_specs

from components.arrow_example_gen.splits import COLUMNAR_PROPERTY

# Recorded on the statistics artifact: which payload TFDV read ("parquet copy" or "tf.Example").
READ_FROM_PROPERTY = "conveyor_statistics_read_from"
READ_PARQUET, READ_TF_EXAMPLE = "parquet copy", "tf.Example"


def columnar_view(examples: artifact.Artifact) -> artifact.Artifact | None:
    """The Examples artifact as TFX would see a Parquet ExampleGen's output, or None.

    None when the artifact has no complete Parquet copy, or a split's files are missing.
    The view is an in-memory copy (same id, span and splits; TFX's custom split patterns point
    at the Parquet files): it is only read, never published.
    """
    if not examples.has_custom_property(COLUMNAR_PROPERTY):
        return None
    patterns = json.loads(examples.get_string_custom_property(COLUMNAR_PROPERTY))
    for split in artifact_utils.decode_split_names(examples.split_names):
        if split not in patterns or not glob.glob(os.path.join(examples.uri, patterns[split])):
            logging.warning("the Parquet copy of split %s is missing: reading tf.Examples", split)
            return None
    copied = metadata_store_pb2.Artifact()
    copied.CopyFrom(examples.mlmd_artifact)  # the original, which is recorded, stays unchanged
    view = standard_artifacts.Examples()
    view.set_mlmd_artifact(copied)
    key, value = examples_utils.get_custom_split_patterns_key_and_property(patterns)
    view.set_string_custom_property(key, value)
    # TFX 1.16 parses the name of its FileFormat enum (its docstring's "parquet" fails).
    examples_utils.set_file_format(view, "FILE_FORMAT_PARQUET")
    examples_utils.set_payload_format(view, example_gen_pb2.PayloadFormat.FORMAT_PARQUET)
    return view


class Executor(statistics_gen_executor.Executor):
    """TFX's StatisticsGen executor, given the Parquet view of its examples when there is one."""

    def Do(self, input_dict, output_dict, exec_properties):  # noqa: N802 - TFX's name
        """Runs TFX's StatisticsGen over the Parquet view of the examples when there is one, else
        the tf.Examples, and records which it read on the statistics artifact."""
        examples_key = standard_component_specs.EXAMPLES_KEY
        view = columnar_view(artifact_utils.get_single_instance(input_dict[examples_key]))
        if view is not None:
            input_dict = {**input_dict, examples_key: [view]}
        super().Do(input_dict, output_dict, exec_properties)
        statistics = artifact_utils.get_single_instance(
            output_dict[standard_component_specs.STATISTICS_KEY]
        )
        statistics.set_string_custom_property(
            READ_FROM_PROPERTY, READ_TF_EXAMPLE if view is None else READ_PARQUET
        )
