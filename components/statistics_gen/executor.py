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

import json

from absl import logging
from ml_metadata.proto import metadata_store_pb2
from tensorflow_data_validation.statistics import stats_options
from tfx.components.statistics_gen import executor as statistics_gen_executor
from tfx.components.util import examples_utils
from tfx.proto import example_gen_pb2
from tfx.types import artifact, artifact_utils, standard_artifacts, standard_component_specs
from tfx.utils import io_utils, json_utils

from components.arrow_example_gen.splits import COLUMNAR_PROPERTY
from pipelines.core import storage

# Recorded on the statistics artifact: which payload TFDV read ("parquet copy" or "tf.Example").
READ_FROM_PROPERTY = "conveyor_statistics_read_from"
READ_PARQUET, READ_TF_EXAMPLE = "parquet copy", "tf.Example"
# Recorded on the statistics artifact: how TFDV ran (see in_process.py).
COMPUTED_BY_PROPERTY = "conveyor_statistics_computed_by"
COMPUTED_IN_PROCESS, COMPUTED_ON_BEAM = "TFDV in memory", "TFDV on Beam"


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
        if split not in patterns or not storage.glob(storage.join(examples.uri, patterns[split])):
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
    """TFX's StatisticsGen executor, given the Parquet view of its examples when there is one,
    and computing small splits in this process when Beam would run here anyway."""

    def Do(self, input_dict, output_dict, exec_properties):  # noqa: N802 - TFX's name
        """Computes small tf.Example splits in process (in_process.py) when allowed, else runs
        TFX's StatisticsGen over the Parquet view of the examples when there is one, else the
        tf.Examples; records what it read and how on the statistics artifact."""
        examples_key = standard_component_specs.EXAMPLES_KEY
        examples = artifact_utils.get_single_instance(input_dict[examples_key])
        statistics = artifact_utils.get_single_instance(
            output_dict[standard_component_specs.STATISTICS_KEY]
        )
        view = columnar_view(examples)
        if view is None and self._computed_in_process(
            examples, statistics, input_dict, exec_properties
        ):
            computed_by = COMPUTED_IN_PROCESS
        else:
            if view is not None:
                input_dict = {**input_dict, examples_key: [view]}
            super().Do(input_dict, output_dict, exec_properties)
            computed_by = COMPUTED_ON_BEAM
        statistics.set_string_custom_property(
            READ_FROM_PROPERTY, READ_TF_EXAMPLE if view is None else READ_PARQUET
        )
        statistics.set_string_custom_property(COMPUTED_BY_PROPERTY, computed_by)

    def _computed_in_process(self, examples, statistics, input_dict, exec_properties) -> bool:
        """Computes and writes the statistics in process when in_process.py allows it for these
        examples, options and Beam arguments; False (nothing written) when Beam must."""
        from components.statistics_gen import in_process

        options_json = exec_properties.get(standard_component_specs.STATS_OPTIONS_JSON_KEY)
        options = (
            stats_options.StatsOptions.from_json(options_json)
            if options_json
            else stats_options.StatsOptions()
        )
        if input_dict.get(standard_component_specs.SCHEMA_KEY):
            if options.schema is not None:
                return False  # TFX's executor refuses this, with its own message
            options.schema = io_utils.SchemaReader().read(
                io_utils.get_only_uri_in_dir(
                    artifact_utils.get_single_uri(input_dict[standard_component_specs.SCHEMA_KEY])
                )
            )
        excluded = json_utils.loads(
            exec_properties.get(standard_component_specs.EXCLUDE_SPLITS_KEY, "null")
        )
        splits = [
            split
            for split in artifact_utils.decode_split_names(examples.split_names)
            if split not in (excluded or [])
        ]
        refused = in_process.refusal(
            examples, splits, options, exec_properties, self._beam_pipeline_args
        )
        by_split = None if refused or not splits else in_process.compute(examples, splits, options)
        if by_split is None:
            logging.info("statistics through Beam: %s", refused or "a split is too large or empty")
            return False
        in_process.publish(statistics, examples, by_split, options)
        return True
