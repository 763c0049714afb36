"""The Grafana dashboards in monitoring/dashboards/: the committed JSON is what
monitoring/dashboards.py generates (grafanalib), and every query of every panel and variable
reads a metric Conveyor exports, from a run (pipelines/finish/metrics.py) or from the model
server (pipelines/serving/model_server/metrics.py), or one TF Serving exports
(pipelines/finish/metrics.py's TF_SERVING_METRICS, which cites TF Serving's sources)."""

import json

import pytest

from monitoring import dashboards
from pipelines.finish import metrics
from pipelines.serving.model_server.metrics import ServerMetrics


@pytest.mark.parametrize("name", dashboards.DASHBOARDS)
def test_the_committed_dashboard_is_what_the_code_generates(name):
    committed = (dashboards.OUTPUT_DIR / name).read_text()
    assert committed == dashboards.render(dashboards.DASHBOARDS[name]()), (
        f"monitoring/dashboards/{name} is stale: run `make monitoring`"
    )


@pytest.mark.parametrize("name", dashboards.DASHBOARDS)
def test_every_query_reads_a_metric_conveyor_exports(name):
    exported = (
        metrics.run_metric_names()
        | metrics.exported_names(ServerMetrics().registry)
        | metrics.tf_serving_metric_names()
    )
    rendered = json.loads((dashboards.OUTPUT_DIR / name).read_text())
    queries = dashboards.queries(rendered)
    assert len(queries) > len(rendered["panels"])  # each panel's targets and the variable
    for query in queries:
        read = metrics.metric_names_in(query)
        assert read, f"{query!r} reads no Conveyor metric"
        assert read <= exported, f"{query!r} reads {sorted(read - exported)}, not exported"


def test_a_query_of_a_metric_nobody_exports_is_caught():
    exported = metrics.run_metric_names()
    assert metrics.metric_names_in('rate(conveyor_run_outcomes_total{job="conveyor_x"}[5m])') == {
        "conveyor_run_outcomes_total"
    }
    assert not metrics.metric_names_in("conveyor_run_outcomes_total") <= exported


def test_the_serving_dashboard_reads_tf_servings_own_metrics():
    rendered = json.loads((dashboards.OUTPUT_DIR / "conveyor-serving.json").read_text())
    read = set().union(*(metrics.metric_names_in(q) for q in dashboards.queries(rendered)))
    tf_serving = read & metrics.tf_serving_metric_names()
    assert {
        ":tensorflow:serving:request_count",
        ":tensorflow:serving:request_latency_bucket",
        ":tensorflow:cc:saved_model:load_attempt_count",
        ":tensorflow:serving:model_warmup_latency_bucket",
    } <= tf_serving
    # No wildcard: a name TF Serving does not export is caught.
    assert not {":tensorflow:serving:request_count_total"} <= metrics.tf_serving_metric_names()
