"""The generated dashboards (monitoring/dashboards/*.json) against Grafana's published
dashboard JSON schema (tests/data/grafana/): the model Grafana 11 keeps, with unknown
properties refused. Grafana itself is not run here (no Debian or PyPI build of it); this is
what can be checked without it."""

import copy
import json
from pathlib import Path

import jsonschema
import pytest

from monitoring import dashboards

SCHEMA = Path(__file__).parents[1] / "data" / "grafana" / "dashboard.schema.json"


@pytest.fixture(scope="module")
def schema() -> dict:
    published = json.loads(SCHEMA.read_text())
    # Grafana's dashboard kind has `options?: _` (any value) for a field matcher; the generated
    # JSON schema narrows it to an object, which a byRegexp matcher's string is not.
    published["definitions"]["MatcherConfig"]["properties"]["options"] = {}
    jsonschema.Draft7Validator.check_schema(published)
    return published


def _errors(dashboard: dict, schema: dict) -> list[str]:
    validator = jsonschema.Draft7Validator(schema)
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}"
        for e in validator.iter_errors(dashboard)
    ]


@pytest.mark.parametrize("name", dashboards.DASHBOARDS)
def test_the_committed_dashboard_matches_grafanas_schema(name, schema):
    committed = json.loads((dashboards.OUTPUT_DIR / name).read_text())
    assert _errors(committed, schema) == []
    assert {panel["type"] for panel in committed["panels"]} <= {"timeseries", "stat"}
    for panel in committed["panels"]:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


def test_grafanalibs_own_json_does_not_match_and_the_check_catches_typos(schema):
    # What grafanalib writes (Grafana 4's rows and spans, nulls, data sources by name) is
    # refused: grafana_model is what makes the committed files match.
    raw = json.loads(
        json.dumps(dashboards.serving_dashboard().to_json_data(), cls=dashboards.DashboardEncoder)
    )
    problems = _errors(raw, schema)
    assert any("'rows'" in p for p in problems)
    assert any(p.startswith("panels/0") for p in problems)

    good = json.loads(dashboards.render(dashboards.serving_dashboard()))
    for change in [
        lambda d: d["panels"][0].update(titel="typo"),
        lambda d: d["panels"][0]["gridPos"].update(w="12"),
        lambda d: d["templating"]["list"][1].update(refresh=7),
        lambda d: d["panels"][0]["fieldConfig"]["defaults"]["thresholds"].update(mode="relative%"),
    ]:
        bad = copy.deepcopy(good)
        change(bad)
        assert _errors(bad, schema), "a broken dashboard passed"
