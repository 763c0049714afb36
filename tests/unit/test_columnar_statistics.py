"""Which examples Conveyor's StatisticsGen hands TFX's executor: the Parquet copy only when the
Examples artifact says it is complete and every split's files are there."""

import json

from tfx.components.util import examples_utils, tfxio_utils
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils, standard_artifacts
from tfx_bsl.tfxio import parquet_tfxio

from components.arrow_example_gen.splits import COLUMNAR_PROPERTY
from components.statistics_gen.executor import columnar_view


def _examples(tmp_path, with_copy=True) -> standard_artifacts.Examples:
    tmp_path.mkdir(parents=True, exist_ok=True)
    examples = standard_artifacts.Examples()
    examples.uri = str(tmp_path)
    examples.split_names = artifact_utils.encode_split_names(["train", "eval"])
    examples_utils.set_payload_format(examples, example_gen_pb2.FORMAT_TF_EXAMPLE)
    patterns = {}
    for split in ("train", "eval"):
        (tmp_path / f"Split-{split}").mkdir()
        (tmp_path / f"Split-{split}" / "data_tfrecord-00000-of-00001.gz").write_bytes(b"")
        copy = tmp_path / "conveyor_columnar" / f"Split-{split}"
        copy.mkdir(parents=True)
        (copy / "data_parquet-00000-of-00001.parquet").write_bytes(b"")
        patterns[split] = f"conveyor_columnar/Split-{split}/*"
    if with_copy:
        examples.set_string_custom_property(COLUMNAR_PROPERTY, json.dumps(patterns))
    return examples


def test_the_view_reads_the_parquet_copy_through_tfx_own_parquet_tfxio(tmp_path):
    examples = _examples(tmp_path)
    view = columnar_view(examples)
    tfxio = tfxio_utils.get_split_tfxio([view], "eval", telemetry_descriptors=["test"])
    assert isinstance(tfxio, parquet_tfxio.ParquetTFXIO)
    assert tfxio._file_pattern == [str(tmp_path / "conveyor_columnar/Split-eval/*")]
    assert view.split_names == examples.split_names and view.id == examples.id
    # The recorded artifact is untouched: every other component still reads its tf.Examples.
    assert examples_utils.get_payload_format(examples) == example_gen_pb2.FORMAT_TF_EXAMPLE
    assert not examples.has_custom_property(examples_utils.CUSTOM_SPLIT_PATTERN_PROPERTY_NAME)


def test_examples_without_a_complete_copy_are_read_as_tfx_reads_them(tmp_path):
    assert columnar_view(_examples(tmp_path / "none", with_copy=False)) is None
    partial = _examples(tmp_path / "partial")
    (tmp_path / "partial/conveyor_columnar/Split-eval/data_parquet-00000-of-00001.parquet").unlink()
    assert columnar_view(partial) is None
