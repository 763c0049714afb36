"""A pushed version's model card (pipelines/finish/model_card.py) from fabricated facts: its JSON
against the Model Card Toolkit's schema, its page's escaping of untrusted text, and a card that
cannot be written leaving the run's outcome as it was. tests/e2e/test_penguin.py reads back the
card of a real run."""

import copy
import datetime
import json
from pathlib import Path

import jsonschema
import pytest

from pipelines.core.paths import RunPaths
from pipelines.finish import model_card
from pipelines.finish.model_card import CardFacts, Feature, Gate, SliceMetric, SplitData
from pipelines.serving_state.models_table import model_card_files
from pipelines.spec.loading import load_spec
from tests.unit.test_run_finish import DAG_RUN_ID, DATED, TASKS, LegacyStore, _finish

SCHEMA_FILE = Path(__file__).parents[1] / "data" / "model_card" / "model_card.schema.json"
HOSTILE = "<script>alert('x')</script>"


def card_schema(strict: bool = False) -> dict:
    """The toolkit's schema; `strict` also refuses properties it does not declare, as the
    toolkit's `ModelCard.from_json` does."""
    schema = json.loads(SCHEMA_FILE.read_text())
    if strict:
        schema = copy.deepcopy(schema)
        stack = [schema]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                if node.get("type") == "object" and "properties" in node:
                    node["additionalProperties"] = False
                stack.extend(node.values())
            elif isinstance(node, list):
                stack.extend(node)
    return schema


def assert_valid_card(card: dict) -> None:
    """The card follows the toolkit's schema v0.0.2, with no property it does not declare."""
    for strict in (False, True):
        jsonschema.Draft7Validator(
            card_schema(strict), format_checker=jsonschema.FormatChecker()
        ).validate(card)


def fabricated(**changes) -> CardFacts:
    facts = CardFacts(
        model_name="penguin",
        pipeline="penguin",
        overview="Species & sex <by> measurements",
        version="7",
        pushed_at=datetime.datetime(2026, 11, 28, 2, 30, tzinfo=datetime.timezone.utc),
        run_id="penguin-20261128T020000.000000Z",
        serving_path="/srv/serving/penguin/7",
        labels=["stable"],
        spans=[20785],
        splits=[
            SplitData("train", 229, (20785,), "/root/csv_example_gen/examples/1"),
            SplitData("eval", 115, (20785,), "/root/csv_example_gen/examples/1"),
        ],
        features=[
            Feature(HOSTILE, "BYTES"),
            Feature("body_mass_g", "FLOAT"),
            Feature("year", "INT", role="unused"),
            Feature("species", "BYTES", role="label"),
        ],
        task="classification",
        training={"label": "species", "hidden_units": [16, 8], "note": HOSTILE},
        code_version="abc123",
        metrics=[
            SliceMetric("sparse_categorical_accuracy", "all examples", 0.9652173913043478),
            SliceMetric("sparse_categorical_accuracy", f"{HOSTILE} = Biscoe", 0.98, 0.95, 1.0),
        ],
        gates=[
            Gate("data gate", "passed"),
            Gate("model gate", "blessed", f"against <b>{HOSTILE}</b>"),
            Gate("infra validation", "blessed", "checked on Conveyor's model server"),
        ],
    )
    for key, value in changes.items():
        setattr(facts, key, value)
    return facts


def test_a_card_follows_the_toolkit_schema_and_keeps_every_digit():
    card = model_card.card_json(fabricated())
    assert_valid_card(card)
    assert card["schema_version"] == "0.0.2"
    assert card["model_details"]["version"] == {
        "name": "7",
        "date": "2026-11-28",
        "diff": "trained on spans 20785",
    }
    [overall, sliced] = card["quantitative_analysis"]["performance_metrics"]
    assert float(overall["value"]) == 0.9652173913043478
    assert overall["slice"] == "all examples"
    assert sliced["confidence_interval"] == {"lower_bound": "0.95", "upper_bound": "1.0"}
    assert card["model_parameters"]["input_format_map"] == [
        {"key": HOSTILE, "value": "BYTES"},
        {"key": "body_mass_g", "value": "FLOAT"},
    ]
    assert card["model_parameters"]["output_format"] == "classification of species"
    assert [d["description"] for d in card["model_parameters"]["data"]] == [
        "229 rows of span 20785 (Examples artifact /root/csv_example_gen/examples/1)",
        "115 rows of span 20785 (Examples artifact /root/csv_example_gen/examples/1)",
    ]
    documentation = card["model_details"]["documentation"].splitlines()
    assert "Labels: stable." in documentation
    assert "Gate data gate: passed." in documentation
    assert "Gate infra validation: blessed (checked on Conveyor's model server)." in documentation


def test_a_card_with_nothing_but_its_push_is_still_valid():
    facts = fabricated(splits=[], features=[], metrics=[], gates=[], labels=[], spans=[])
    card = model_card.card_json(facts)
    assert_valid_card(card)
    assert card["model_details"]["version"]["diff"] == "trained on spans unknown"


def test_the_page_shows_untrusted_text_as_text_never_markup():
    page = model_card.card_page(fabricated())
    assert "<script" not in page  # a column name, a slice, a note, the training config
    assert "<b>" not in page
    # The column name, the slice and the gate's note as text; the training value as JSON.
    assert page.count("&lt;script&gt;") == 3
    assert "against &lt;b&gt;&lt;script&gt;" in page
    assert '"\\u003cscript\\u003ealert(\\u0027x\\u0027)\\u003c/script\\u003e"' in page
    assert "Species &amp; sex &lt;by&gt; measurements" in page
    assert '<td>sparse_categorical_accuracy</td><td class="num">0.9652</td>' in page
    assert "0.95 to 1" in page
    assert "<td>year</td><td>INT</td><td>unused</td>" in page


@pytest.fixture
def pushed_night(tmp_path):
    """A penguin night whose Airflow DAG run pushed version 3, in a store as TFX writes it."""
    loaded = load_spec("penguin", env="ci", overrides=DATED)
    paths = RunPaths(workdir=tmp_path.resolve(), spec=loaded.spec)
    store = LegacyStore(loaded.spec, paths, DAG_RUN_ID)
    store.examples()
    for component in ("statistics_gen", "data_gate", "trainer"):
        store.execution(component, "complete")
    pushed = store.artifact(
        "PushedModel",
        str(paths.pipeline_root / "pusher" / "pushed_model" / "9"),
        pushed=1,
        pushed_version="3",
    )
    store.execution("pusher", "complete", {"pushed_model": pushed})
    return loaded.spec, paths


def test_a_card_that_cannot_be_written_is_a_warning_and_the_push_stands(pushed_night, monkeypatch):
    spec, paths = pushed_night

    def refuse(result, paths):
        raise OSError("the serving bucket refused the write")

    monkeypatch.setattr(model_card, "write_model_card", refuse)
    result, lines = _finish(spec, paths, dict.fromkeys(TASKS, "success"))
    assert result.outcome == "pushed" and result.pushed_version == "3"
    assert "warning: no model card written: OSError: the serving bucket refused the write" in lines
    card, page = model_card_files(paths.serving_config_dir, spec.push.model_name, 3)
    assert not card.exists() and not page.exists()
    assert any(line.startswith("report: ") for line in lines)
