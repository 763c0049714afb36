"""The record of accepted spans a Kubeflow run keeps in its workdir (components/spans/
accepted.py), written and read through real files and TFX artifacts: the drift baseline is the
newest span accepted before tonight's, the training window the blessed ones among the spans
before it, and the Trainer's executor adds that window to its examples."""

import json

from tfx.types import standard_artifacts, standard_component_specs

from components.spans.accepted import (
    blessed_window,
    last_accepted_before,
    record_accepted_span,
    record_blessing,
)
from components.trainer.component import WINDOW_KEY, with_window
from pipelines.core.artifact_files import ACCEPTED_SPANS_FOLDER


def _accepted(tmp_path, span: int | None):
    """The statistics and examples a gate accepted for `span` (None: data without spans)."""
    statistics = standard_artifacts.ExampleStatistics()
    statistics.uri = str(tmp_path / f"statistics-{span}")
    statistics.split_names = '["train", "eval"]'
    examples = standard_artifacts.Examples()
    examples.uri = str(tmp_path / f"examples-{span}")
    examples.split_names = '["train", "eval"]'
    examples.set_string_custom_property("payload_format", "FORMAT_TF_EXAMPLE")
    if span is not None:
        examples.set_int_custom_property("span", span)  # as FileBasedExampleGen's driver sets it
    return statistics, examples


def test_the_drift_baseline_is_the_newest_span_accepted_before_tonights(tmp_path):
    record_dir = str(tmp_path / ACCEPTED_SPANS_FOLDER)
    assert last_accepted_before(record_dir, 20781) == (None, None)  # nothing recorded yet
    for span in (20780, 20782, 20778):  # a backfill records an older span later
        assert record_accepted_span(record_dir, *_accepted(tmp_path, span))
    statistics, examples = last_accepted_before(record_dir, 20782)
    assert statistics.uri == str(tmp_path / "statistics-20780")
    assert statistics.split_names == '["train", "eval"]'
    assert examples.get_int_custom_property("span") == 20780
    # A re-run of a night measures from the span before it, not from itself or a later one.
    statistics, _ = last_accepted_before(record_dir, 20780)
    assert statistics.uri == str(tmp_path / "statistics-20778")
    assert last_accepted_before(record_dir, 20778) == (None, None)


def test_data_without_spans_is_not_recorded(tmp_path):
    record_dir = tmp_path / ACCEPTED_SPANS_FOLDER
    assert record_accepted_span(str(record_dir), *_accepted(tmp_path, None)) is None
    assert not record_dir.exists()


def test_the_window_holds_the_earlier_spans_whose_night_was_blessed(tmp_path):
    # The simulated week with a window of 3: night 4's labels were shuffled (accepted by the
    # gate, not blessed), night 5 was blocked (never accepted).
    record_dir = str(tmp_path / ACCEPTED_SPANS_FOLDER)
    for span, blessed in ((1, True), (2, True), (4, False), (6, None)):
        record_accepted_span(record_dir, *_accepted(tmp_path, span))
        if blessed is not None:
            assert record_blessing(record_dir, span, blessed)
    assert record_blessing(record_dir, 5, True) is None  # no record: nothing to bless
    assert [e.get_int_custom_property("span") for e in blessed_window(record_dir, 3, 3)] == [1, 2]
    assert blessed_window(record_dir, 6, 3) == []  # 4 not blessed, 5 blocked
    (second,) = blessed_window(record_dir, 4, 3)  # 3 never recorded
    assert second.uri == str(tmp_path / "examples-2")
    # What TFX's readers go by comes back with it.
    assert second.get_string_custom_property("payload_format") == "FORMAT_TF_EXAMPLE"
    # A re-run of a night on the same examples (KFP's cache) keeps its blessing; on new
    # examples the record is replaced, its blessing unknown until judged again.
    record_accepted_span(record_dir, *_accepted(tmp_path, 2))
    assert blessed_window(record_dir, 3, 3)[-1].get_int_custom_property("span") == 2
    statistics, examples = _accepted(tmp_path, 2)
    examples.uri = str(tmp_path / "examples-2-again")
    record_accepted_span(record_dir, statistics, examples)
    assert blessed_window(record_dir, 3, 3)[-1].get_int_custom_property("span") == 1


def test_the_trainer_adds_the_window_to_tonights_examples_and_tells_run_fn_nothing(tmp_path):
    record_dir = str(tmp_path / ACCEPTED_SPANS_FOLDER)
    for span in (1, 2):
        record_accepted_span(record_dir, *_accepted(tmp_path, span))
        record_blessing(record_dir, span, True)
    _, tonight = _accepted(tmp_path, 3)
    key = standard_component_specs.CUSTOM_CONFIG_KEY
    config = {"trainer": {"label": "big_tipper"}, WINDOW_KEY: {"dir": record_dir, "num_spans": 2}}
    inputs, properties = with_window({"examples": [tonight]}, {key: json.dumps(config)})
    assert [e.get_int_custom_property("span") for e in inputs["examples"]] == [2, 3]
    assert json.loads(properties[key]) == {"trainer": {"label": "big_tipper"}}
    # Without the key (a local run, whose resolver gave the window): as they were.
    local = {key: json.dumps({"trainer": {}})}
    assert with_window({"examples": [tonight]}, local) == ({"examples": [tonight]}, local)
