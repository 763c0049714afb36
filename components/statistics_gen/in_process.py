"""Statistics of small splits computed in this process by TFDV's in-memory API, without Beam.

On a few hundred rows, TFX's StatisticsGen spends nearly all its time on Beam rather than on
TFDV: expanding `tfdv.GenerateStatistics` into its transforms, pickling them, and setting up
the bundles of the in-memory DirectRunner, about 2 to 3 s of a cold penguin run on two cores
(`make bench`; TFDV itself takes 0.1 s there). The DirectRunner in memory runs everything in
this process anyway, so for small splits this module asks TFDV for the same statistics with
`generate_statistics_in_memory`, the API TFDV provides for data that fits in memory, and writes
them where and as TFX's executor writes them (`FeatureStats.pb`, the same artifact
properties).

The two ways agree where this path is taken:
- TFDV's in-memory run counts top values and uniques with sketches (Misra-Gries, KMV) where
  its Beam run counts them exactly. Below the sketches' sizes the sketches are exact, so a
  result with a string feature of `MISRA_GRIES_BUCKETS` or more distinct values is thrown away
  and the split goes to Beam.
- Quantiles and histograms come from the same sketch both ways, fed all rows at once here and
  batch by batch there; on at most `MAX_ROWS` rows a split they came out the same (checked on
  generated taxi rows up to 19,300 in a split).
- Means and standard deviations are sums: Beam adds them up batch by batch, this path in one
  pass, so they may differ in their last digits (1e-15 relative on the taxi sample).
- Anything the in-memory API does not do (sampling, lift statistics for a label feature,
  slicing, sharded output, reading only some paths) leaves the work to Beam.
A unit test runs both ways over the penguin and taxi samples and compares the files and the
artifact's properties.

Only the DirectRunner in memory qualifies: on any other runner or mode the profile asked for
Beam's workers, and gets them.
"""

from __future__ import annotations

import os
from typing import Any

from absl import logging
from tensorflow_data_validation.statistics import stats_options as stats_options_lib
from tfx.components.statistics_gen import executor as tfx_statistics_executor
from tfx.components.util import examples_utils
from tfx.proto import example_gen_pb2
from tfx.types import artifact, artifact_utils, standard_component_specs
from tfx.utils import io_utils, json_utils, stats_utils

from components.arrow_example_gen.placement import reads_in_process

# Examples up to this many bytes on disk (all splits) are read into memory at all...
MAX_BYTES = 4 << 20
# ...and computed here when each split has at most this many rows: the size up to which the two
# ways were seen to give the same quantiles and histograms (taxi rows, 19,300 in a split), and
# where Beam's fixed cost is most of what the Beam run would take.
MAX_ROWS = 20_000
# TFDV's Misra-Gries sketch size for the in-memory top-k (stats_impl._DEFAULT_MG_SKETCH_SIZE):
# below it, its counts are exact.
MISRA_GRIES_BUCKETS = 1024


def refusal(
    examples: artifact.Artifact,
    split_names: list[str],
    options: stats_options_lib.StatsOptions,
    exec_properties: dict[str, Any],
    beam_args: list[str],
) -> str | None:
    """Why these splits must go through Beam, or None when they may be computed here."""
    if not reads_in_process(beam_args):
        return "the profile's Beam runner is not the in-memory DirectRunner"
    if examples_utils.get_payload_format(examples) != example_gen_pb2.FORMAT_TF_EXAMPLE or (
        examples.has_custom_property(examples_utils.CUSTOM_SPLIT_PATTERN_PROPERTY_NAME)
    ):
        return "the examples are not tf.Examples in TFX's split directories"
    if exec_properties.get(standard_component_specs.SHARDED_STATS_OUTPUT_KEY):
        return "sharded statistics output was asked for"
    if options.sample_rate not in (None, 1.0) or any(
        rate != 1.0 for rate in _sample_rates(exec_properties).values()
    ):
        return "examples are sampled"
    if options.label_feature or options.experimental_filter_read_paths:
        return "lift statistics or filtered reads were asked for"
    if options.experimental_slice_functions or options.experimental_slice_sqls:
        return "sliced statistics were asked for"
    if _bytes_on_disk(examples, split_names) > MAX_BYTES:
        return f"the examples are over {MAX_BYTES >> 20} MiB"
    return None


def compute(
    examples: artifact.Artifact, split_names: list[str], options: stats_options_lib.StatsOptions
) -> dict[str, Any] | None:
    """Each split's DatasetFeatureStatisticsList, computed in memory; None when a split is too
    big for the two ways to agree (see the module's docstring)."""
    from tensorflow_data_validation.statistics import stats_impl
    from tfx.components.util import tfxio_utils
    from tfx_bsl.tfxio import dataset_options

    found = {}
    for split in split_names:
        tfxio = tfxio_utils.get_split_tfxio(
            examples=[examples],
            split=split,
            telemetry_descriptors=tfx_statistics_executor._TELEMETRY_DESCRIPTORS,  # noqa: SLF001
        )
        batches = list(
            tfxio.RecordBatches(
                dataset_options.RecordBatchesOptions(
                    batch_size=MAX_ROWS + 1, drop_final_batch=False, num_epochs=1, shuffle=False
                )
            )
        )
        if len(batches) != 1:
            return None  # an empty split (TFDV's in-memory API needs rows), or over MAX_ROWS
        # No per-split options: a sample rate by split, TFX's reason for them, goes to Beam.
        statistics = stats_impl.generate_statistics_in_memory(batches[0], options)
        if not _sketches_were_exact(statistics):
            return None
        found[split] = statistics
    return found


def _sketches_were_exact(statistics) -> bool:
    """Whether every string feature had fewer distinct values than the top-k sketch's size."""
    for dataset in statistics.datasets:
        for feature in dataset.features:
            if feature.HasField("string_stats") and (
                feature.string_stats.unique >= MISRA_GRIES_BUCKETS
            ):
                return False
    return True


def publish(
    statistics_artifact: artifact.Artifact,
    examples: artifact.Artifact,
    by_split: dict[str, Any],
    options: stats_options_lib.StatsOptions,
) -> None:
    """Writes each split's statistics and sets the artifact's properties as TFX's executor
    does: split names, span, dashboard link, sample rate by split."""
    split_names = list(by_split)
    statistics_artifact.split_names = artifact_utils.encode_split_names(split_names)
    statistics_artifact.span = examples.span
    try:
        link = stats_utils.generate_stats_dashboard_link(statistics_artifact)
    except Exception:  # noqa: BLE001 - TFX logs and carries on here too
        logging.exception("could not generate the statistics dashboard link")
        link = ""
    statistics_artifact.set_string_custom_property(
        tfx_statistics_executor.STATS_DASHBOARD_LINK, link
    )
    statistics_artifact.set_json_value_custom_property(
        tfx_statistics_executor.SAMPLE_RATE_BY_SPLIT_PROPERTY_NAME,
        json_utils.dumps({split: options.sample_rate or 1.0 for split in split_names}),
    )
    for split, statistics in by_split.items():
        output_uri = artifact_utils.get_split_uri([statistics_artifact], split)
        io_utils.write_bytes_file(
            os.path.join(output_uri, tfx_statistics_executor.DEFAULT_FILE_NAME),
            statistics.SerializeToString(),
        )


def _sample_rates(exec_properties: dict[str, Any]) -> dict[str, float]:
    return (
        json_utils.loads(
            exec_properties.get(standard_component_specs.SAMPLE_RATE_BY_SPLIT_KEY, "null")
        )
        or {}
    )


def _bytes_on_disk(examples: artifact.Artifact, split_names: list[str]) -> int:
    """The size of the splits' files, through TFX's file I/O (local or remote)."""
    from tfx.dsl.io import fileio

    size = 0
    for split in split_names:
        split_dir = artifact_utils.get_split_uri([examples], split)
        for name in fileio.glob(io_utils.all_files_pattern(split_dir)):
            size += fileio.stat(name).length
    return size
