"""Kubeflow's schema_gen for `schema.source: infer` (components/accepted_schema): before any
run was accepted it infers as TFX's SchemaGen does; once a data gate recorded the schema it
accepted data against, it keeps that schema, whatever tonight's statistics say."""

import pandas as pd
import tensorflow_data_validation as tfdv
from tfx.types import standard_artifacts
from tfx.utils import io_utils

from components.accepted_schema.component import (
    ACCEPTED_SCHEMA_KEY,
    SCHEMA_FROM_PROPERTY,
    Executor,
    accepted_schema_uri,
    record_accepted_schema,
)


def _statistics(tmp_path, name: str, frame: pd.DataFrame):
    """An ExampleStatistics artifact of `frame` as its train split, as StatisticsGen writes it."""
    statistics = standard_artifacts.ExampleStatistics()
    statistics.uri = str(tmp_path / name / "statistics")
    statistics.split_names = '["train"]'
    split = tmp_path / name / "statistics" / "Split-train"
    split.mkdir(parents=True)
    computed = tfdv.generate_statistics_from_dataframe(frame)
    (split / "FeatureStats.pb").write_bytes(computed.SerializeToString())
    return statistics


def _schema_gen(tmp_path, name: str, statistics, record: str):
    schema = standard_artifacts.Schema()
    schema.uri = str(tmp_path / name / "schema")
    (tmp_path / name / "schema").mkdir(parents=True)
    Executor().Do(
        {"statistics": [statistics]},
        {"schema": [schema]},
        {"infer_feature_shape": 0, "exclude_splits": "[]", ACCEPTED_SCHEMA_KEY: record},
    )
    text = (tmp_path / name / "schema" / "schema.pbtxt").read_text()
    return schema, text


def test_it_infers_before_any_run_was_accepted_then_keeps_the_accepted_schema(tmp_path):
    record = str(tmp_path / "runs" / "penguin" / "accepted_schema.json")
    night_1 = pd.DataFrame({"island": ["Biscoe", "Dream"], "flipper_length_mm": [181.0, 190.0]})
    first, inferred = _schema_gen(tmp_path, "night-1", _statistics(tmp_path, "n1", night_1), record)
    assert 'name: "flipper_length_mm"' in inferred
    assert first.get_string_custom_property(SCHEMA_FROM_PROPERTY) == ""
    assert accepted_schema_uri(record) is None

    record_accepted_schema(record, first)  # the data gate passed night 1 against it
    assert accepted_schema_uri(record) == first.uri
    # Night 2 lost a column: the kept schema still names it, so the validator flags it.
    night_2 = pd.DataFrame({"island": ["Biscoe", "Torgersen"]})
    second, kept = _schema_gen(tmp_path, "night-2", _statistics(tmp_path, "n2", night_2), record)
    assert kept == inferred
    assert second.get_string_custom_property(SCHEMA_FROM_PROPERTY) == first.uri
    schema = io_utils.SchemaReader().read(str(tmp_path / "night-2" / "schema" / "schema.pbtxt"))
    anomalies = tfdv.validate_statistics(tfdv.generate_statistics_from_dataframe(night_2), schema)
    assert "flipper_length_mm" in anomalies.anomaly_info
