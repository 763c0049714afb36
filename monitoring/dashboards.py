"""Conveyor's Grafana dashboards, generated from code with grafanalib (`make monitoring`).

Two dashboards, written as JSON into `monitoring/dashboards/` for Grafana's file provisioning
(monitoring/docker-compose.yml, monitoring/kubernetes/):

- `conveyor-pipelines.json`, pipeline health: each pipeline's last outcome, hours since its
  last push, the pushed version, run and component durations, rows per split, anomalies, drift
  and skew per column, and the candidate's and baseline's evaluation metrics against the floor;
- `conveyor-serving.json`, the model server: requests by status, the server-error ratio, p50
  and p99 latency against the budget, loaded versions, model load times and failures, first
  for Conveyor's model server (`conveyor_serving_*`), then for TF Serving itself (the
  `tensorflow/serving` image, `:tensorflow:serving:*`: its own names, labels and units); and
  per variant, to compare a canary with stable: Conveyor's server by the `version` that
  answered, TF Serving by a `variant` label the scrape configuration copies from the pod label
  `conveyor/variant` that `conveyor deploy render` sets.

Every query reads metrics Conveyor exports (pipelines/finish/metrics.py for runs,
pipelines/serving/model_server/metrics.py for serving) or TF Serving exports (the list citing TF
Serving's sources in pipelines/finish/metrics.py); tests/unit/test_monitoring_dashboards.py
checks that, and that the committed JSON is what this module generates.

grafanalib writes the dashboard model of Grafana 4 (`rows`, `span`, data sources by name,
`null` for every unset field), which Grafana migrates when it loads it. `render` writes the
current model instead (`grafana_model`), and tests/unit/test_grafana_schema.py validates it
against Grafana's published dashboard JSON schema (Grafana itself is not run by the tests).

    .venv/bin/python monitoring/dashboards.py            # rewrite monitoring/dashboards/
    .venv/bin/python monitoring/dashboards.py --check    # exit 1 when a file is stale
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from grafanalib import core
from grafanalib._gen import DashboardEncoder

OUTPUT_DIR = Path(__file__).parent / "dashboards"
DATASOURCE = "${datasource}"  # chosen on the dashboard (templating), Prometheus by default
# The label naming a variant (stable, canary) on TF Serving's series: the pod label
# `conveyor/variant` that `conveyor deploy render` sets, relabelled to `variant` by the
# scrape configuration (a PodMonitor's relabelings), as TF Serving's metrics carry none.
VARIANT = "variant"
# What grafanalib writes that Grafana's current dashboard model no longer has: the Grafana 4
# layout (rows, spans, heights), per-panel edit flags, and tag queries of variables.
LEGACY_KEYS = {
    "dashboard": {"__inputs", "rows", "style", "hideControls", "sharedCrosshair"},
    "panel": {"editable", "error", "height", "minSpan", "span"},
    "variable": {"tags", "tagsQuery", "tagValuesQuery", "useTags"},
    "timepicker": {"time_options"},
}
ERROR_RATIO_BUDGET = 0.01  # as monitoring/rules/conveyor.rules.yml
LATENCY_BUDGET_SECONDS = 0.25  # push.latency_budget_ms's default, as the rules
INFERENCE = 'method=~"predict|classify|regress"'
# TF Serving's labels: `API` is "Predict" on gRPC and the REST method's word on REST; `status`
# is the canonical code's name, of which these are answered with a 5xx (server errors).
TF_INFERENCE = 'API=~"(?i)predict|classify|regress"'
TF_SERVER_ERRORS = (
    'status=~"UNKNOWN|INTERNAL|DATA_LOSS|UNIMPLEMENTED|UNAVAILABLE|DEADLINE_EXCEEDED"'
)
MICROSECONDS = 1e6  # TF Serving's latencies are in microseconds
WIDTH = 24  # Grafana's grid is 24 columns wide


def _target(expr: str, legend: str = "", ref: str = "A") -> core.Target:
    return core.Target(expr=expr, legendFormat=legend, refId=ref, datasource=DATASOURCE)


def _series(title: str, targets: list[core.Target], unit: str = "", **extra) -> core.TimeSeries:
    return core.TimeSeries(title=title, dataSource=DATASOURCE, targets=targets, unit=unit, **extra)


def _stat(title: str, targets: list[core.Target], unit: str = "none", **extra) -> core.Stat:
    return core.Stat(
        title=title,
        dataSource=DATASOURCE,
        targets=targets,
        format=unit,
        reduceCalc="lastNotNull",
        graphMode="none",
        **extra,
    )


def _latency_panel(title: str, quantile_query, legend: str) -> core.TimeSeries:
    """p50 and p99 of a latency histogram in seconds, against the latency budget's line;
    `quantile_query(q)` is the PromQL of quantile q, `legend` the series' name before `pN`."""
    return _series(
        f"{title} p50 and p99 (budget {LATENCY_BUDGET_SECONDS * 1000:.0f} ms)",
        [
            _target(quantile_query(q), f"{legend} p{round(q * 100)}", ref)
            for q, ref in ((0.5, "A"), (0.99, "B"))
        ],
        unit="s",
        thresholds=_threshold(LATENCY_BUDGET_SECONDS),
        thresholdsStyleMode="line",
    )


def _threshold(value: float) -> list[dict]:
    """Threshold steps: green below `value`, red from it."""
    return [{"color": "green", "value": None}, {"color": "red", "value": value}]


def _laid_out(panels: list, height: int = 8, per_row: int = 2) -> list:
    """`panels` in rows of `per_row`, each `height` grid units high."""
    width = WIDTH // per_row
    for index, panel in enumerate(panels):
        panel.gridPos = core.GridPos(
            h=height, w=width, x=(index % per_row) * width, y=(index // per_row) * height
        )
    return panels


def _templating(variables: list[tuple[str, str, str]]) -> core.Templating:
    """The data source, then one multi-value variable per (metric, label, title)."""
    return core.Templating(
        list=[
            core.Template(
                name="datasource",
                label="Data source",
                type="datasource",
                query="prometheus",
                default="Prometheus",
            ),
            *(
                core.Template(
                    name=variable,
                    label=title,
                    dataSource=DATASOURCE,
                    query=f"label_values({variable_metric}, {variable})",
                    includeAll=True,
                    multi=True,
                    default="$__all",
                )
                for variable_metric, variable, title in variables
            ),
        ]
    )


def _dashboard(
    title: str,
    uid: str,
    description: str,
    *,
    refresh: str,
    since: str,
    variables: list[tuple[str, str, str]],
    panels: list,
) -> core.Dashboard:
    """A Conveyor dashboard: UTC, tagged `conveyor`, a template variable per (metric, label,
    title) of `variables`, the panels laid out in rows."""
    return core.Dashboard(
        title=title,
        uid=uid,
        description=description,
        tags=["conveyor"],
        timezone="utc",
        refresh=refresh,
        time=core.Time(since, "now"),
        templating=_templating(variables),
        panels=_laid_out(panels),
    ).auto_panel_ids()


def pipeline_dashboard() -> core.Dashboard:
    """Pipeline health: what each night did and what it saw."""
    p = 'pipeline=~"$pipeline"'
    panels = [
        _stat(
            "Last run blocked or failed",
            [
                _target(
                    f'sum by (pipeline) (conveyor_run_outcome{{{p}, outcome=~"blocked|failed"}})',
                    "{{pipeline}}",
                )
            ],
            thresholds=_threshold(1),
            colorMode="background",
        ),
        _stat(
            "Hours since the last push",
            [
                _target(
                    "(time() - max by (pipeline) "
                    f"(conveyor_model_last_push_timestamp_seconds{{{p}}})) / 3600",
                    "{{pipeline}}",
                )
            ],
            thresholds=_threshold(36),
            colorMode="background",
        ),
        _series(
            "Outcome of each run",
            [
                _target(
                    f"max by (pipeline, outcome) (conveyor_run_outcome{{{p}}}) == 1",
                    "{{pipeline}} {{outcome}}",
                )
            ],
            drawStyle="points",
            pointSize=8,
        ),
        _series(
            "Pushed version",
            [_target(f"max by (pipeline) (conveyor_model_pushed_version{{{p}}})", "{{pipeline}}")],
            lineInterpolation="stepAfter",
        ),
        _series(
            "Run duration",
            [_target(f"conveyor_run_duration_seconds{{{p}}}", "{{pipeline}}")],
            unit="s",
        ),
        _series(
            "Component durations",
            [_target(f"conveyor_component_duration_seconds{{{p}}}", "{{pipeline}} {{component}}")],
            unit="s",
            stacking={"mode": "normal", "group": "A"},
        ),
        _series(
            "Rows per split",
            [_target(f"conveyor_data_rows{{{p}}}", "{{pipeline}} {{split}}")],
            unit="short",
        ),
        _series(
            "Columns with anomalies, per split",
            [_target(f"conveyor_data_anomalies{{{p}}}", "{{pipeline}} {{split}}")],
            unit="short",
        ),
        _series(
            "Drift distance per column (dashed: threshold)",
            [
                _target(f"conveyor_data_drift_distance{{{p}}}", "{{pipeline}} {{column}}"),
                _target(
                    f"conveyor_data_drift_threshold{{{p}}}",
                    "threshold {{pipeline}} {{column}}",
                    "B",
                ),
            ],
            overrides=[_dashed("threshold")],
        ),
        _series(
            "Training/serving skew per column (dashed: threshold)",
            [
                _target(f"conveyor_data_skew_distance{{{p}}}", "{{pipeline}} {{column}}"),
                _target(
                    f"conveyor_data_skew_threshold{{{p}}}", "threshold {{pipeline}} {{column}}", "B"
                ),
            ],
            overrides=[_dashed("threshold")],
        ),
        _series(
            "Evaluation, all examples: candidate, baseline and floor (dashed)",
            [
                _target(
                    f'conveyor_evaluation_metric{{{p}, slice="overall"}}',
                    "{{pipeline}} {{metric}} {{model}}",
                ),
                _target(
                    f"conveyor_evaluation_lower_bound{{{p}}}", "floor {{pipeline}} {{metric}}", "B"
                ),
            ],
            overrides=[_dashed("floor")],
        ),
        _series(
            "Evaluation of the candidate per slice",
            [
                _target(
                    f'conveyor_evaluation_metric{{{p}, model="candidate", slice!="overall"}}',
                    "{{pipeline}} {{metric}} {{slice}}",
                )
            ],
        ),
        _series(
            "Model gate and infra validation (1: blessed)",
            [
                _target(f"conveyor_model_blessed{{{p}}}", "{{pipeline}} model"),
                _target(f"conveyor_infra_validation_blessed{{{p}}}", "{{pipeline}} infra", "B"),
            ],
            drawStyle="points",
            pointSize=8,
        ),
        _series(
            "Cache hits per run",
            [_target(f"sum by (pipeline) (conveyor_component_cached{{{p}}})", "{{pipeline}}")],
            unit="short",
        ),
    ]
    return _dashboard(
        "Conveyor: pipelines",
        "conveyor-pipelines",
        "Each pipeline's nights: outcome, pushes, data and evaluation (Conveyor).",
        refresh="1m",
        since="now-30d",
        variables=[("conveyor_run_outcome", "pipeline", "Pipeline")],
        panels=panels,
    )


def serving_dashboard() -> core.Dashboard:
    """The model server: traffic, errors, latency and model loading."""
    m = 'model=~"$model"'
    panels = [
        _series(
            "Requests per second by status",
            [
                _target(
                    f"sum by (model, status) (rate(conveyor_serving_requests_total{{{m}}}[5m]))",
                    "{{model}} {{status}}",
                )
            ],
            unit="reqps",
        ),
        _series(
            f"Server-error ratio (budget {ERROR_RATIO_BUDGET:.0%})",
            [
                _target(
                    "sum by (model) "
                    f'(rate(conveyor_serving_requests_total{{{m}, status=~"5.."}}[5m]))'
                    f" / sum by (model) (rate(conveyor_serving_requests_total{{{m}}}[5m]))",
                    "{{model}}",
                )
            ],
            unit="percentunit",
            thresholds=_threshold(ERROR_RATIO_BUDGET),
            thresholdsStyleMode="line",
        ),
        _latency_panel(
            "Inference latency",
            lambda q: (
                f"histogram_quantile({q}, sum by (model, le) (rate("
                f"conveyor_serving_request_latency_seconds_bucket{{{m}, {INFERENCE}}}[5m])))"
            ),
            "{{model}}",
        ),
        _series(
            "Requests per second by version and method",
            [
                _target(
                    "sum by (model, version, method) "
                    f"(rate(conveyor_serving_requests_total{{{m}}}[5m]))",
                    "{{model}} v{{version}} {{method}}",
                )
            ],
            unit="reqps",
        ),
        _latency_panel(
            "Inference latency by version (stable and canary)",
            lambda q: (
                f"histogram_quantile({q}, sum by (model, version, le) (rate("
                f"conveyor_serving_request_latency_seconds_bucket{{{m}, {INFERENCE}}}[5m])))"
            ),
            "{{model}} v{{version}}",
        ),
        _series(
            f"Server-error ratio by version (budget {ERROR_RATIO_BUDGET:.0%})",
            [
                _target(
                    "sum by (model, version) "
                    f'(rate(conveyor_serving_requests_total{{{m}, status=~"5.."}}[5m]))'
                    " / sum by (model, version) "
                    f"(rate(conveyor_serving_requests_total{{{m}}}[5m]))",
                    "{{model}} v{{version}}",
                )
            ],
            unit="percentunit",
            thresholds=_threshold(ERROR_RATIO_BUDGET),
            thresholdsStyleMode="line",
        ),
        _series(
            "Loaded versions",
            [_target(f"conveyor_serving_loaded_versions{{{m}}}", "{{model}}")],
            unit="short",
        ),
        _series(
            "Model load time p99 and load failures",
            [
                _target(
                    "histogram_quantile(0.99, sum by (model, le) "
                    f"(rate(conveyor_serving_model_load_seconds_bucket{{{m}}}[1h])))",
                    "{{model}} load p99",
                ),
                _target(
                    f"increase(conveyor_serving_model_load_failures_total{{{m}}}[1h])",
                    "{{model}} failures",
                    "B",
                ),
            ],
            unit="s",
        ),
        *_tf_serving_panels(),
    ]
    return _dashboard(
        "Conveyor: serving",
        "conveyor-serving",
        "Traffic, errors, latency and model loading of the model server: Conveyor's "
        "(conveyor serve), then TF Serving's own metrics (the tensorflow/serving image).",
        refresh="30s",
        since="now-6h",
        variables=[
            ("conveyor_serving_requests_total", "model", "Model"),
            (":tensorflow:serving:request_count", "model_name", "TF Serving model"),
        ],
        panels=panels,
    )


def _tf_serving_panels() -> list:
    """TF Serving's own metrics (pipelines/finish/metrics.py's TF_SERVING_METRICS): its request
    counter by status code, the server-error ratio, its latency histogram (microseconds, shown
    in seconds), and its SavedModel loads and warm-ups (labelled by the version's path)."""
    m = 'model_name=~"$model_name"'
    # load_attempt_count and model_warmup_latency name the version's folder, not the model.
    path = 'model_path=~".*/($model_name)/[0-9]+/?"'
    return [
        _series(
            "TF Serving: requests per second by status",
            [
                _target(
                    "sum by (model_name, status) "
                    f"(rate(:tensorflow:serving:request_count{{{m}}}[5m]))",
                    "{{model_name}} {{status}}",
                )
            ],
            unit="reqps",
        ),
        _series(
            f"TF Serving: server-error ratio (budget {ERROR_RATIO_BUDGET:.0%})",
            [
                _target(
                    "sum by (model_name) "
                    f"(rate(:tensorflow:serving:request_count{{{m}, {TF_SERVER_ERRORS}}}[5m]))"
                    " / sum by (model_name) "
                    f"(rate(:tensorflow:serving:request_count{{{m}}}[5m]))",
                    "{{model_name}}",
                )
            ],
            unit="percentunit",
            thresholds=_threshold(ERROR_RATIO_BUDGET),
            thresholdsStyleMode="line",
        ),
        _latency_panel(
            "TF Serving: inference latency",
            lambda q: (
                f"histogram_quantile({q}, sum by (model_name, le) (rate("
                f":tensorflow:serving:request_latency_bucket{{{m}, {TF_INFERENCE}}}[5m])))"
                f" / {MICROSECONDS:g}"
            ),
            "{{model_name}}",
        ),
        _series(
            "TF Serving: requests per second by variant and status",
            [
                _target(
                    f"sum by (model_name, {VARIANT}, status) "
                    f"(rate(:tensorflow:serving:request_count{{{m}}}[5m]))",
                    f"{{{{model_name}}}} {{{{{VARIANT}}}}} {{{{status}}}}",
                )
            ],
            unit="reqps",
        ),
        _latency_panel(
            "TF Serving: inference latency by variant",
            lambda q: (
                f"histogram_quantile({q}, sum by (model_name, {VARIANT}, le) (rate("
                f":tensorflow:serving:request_latency_bucket{{{m}, {TF_INFERENCE}}}[5m])))"
                f" / {MICROSECONDS:g}"
            ),
            f"{{{{model_name}}}} {{{{{VARIANT}}}}}",
        ),
        _series(
            "TF Serving: SavedModel loads per hour by status, and warm-up time p99",
            [
                _target(
                    "sum by (status) "
                    f"(increase(:tensorflow:cc:saved_model:load_attempt_count{{{path}}}[1h]))",
                    "loads {{status}}",
                ),
                _target(
                    "histogram_quantile(0.99, sum by (le) (rate("
                    f":tensorflow:serving:model_warmup_latency_bucket{{{path}}}[1h])))"
                    f" / {MICROSECONDS:g}",
                    "warm-up p99 (s)",
                    "B",
                ),
            ],
            unit="short",
        ),
    ]


def _dashed(prefix: str) -> dict:
    """A field override drawing the series whose name starts with `prefix` dashed."""
    return {
        "matcher": {"id": "byRegexp", "options": f"^{prefix} .*"},
        "properties": [
            {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}},
        ],
    }


DASHBOARDS = {
    "conveyor-pipelines.json": pipeline_dashboard,
    "conveyor-serving.json": serving_dashboard,
}


def render(dashboard: core.Dashboard) -> str:
    """A dashboard as the JSON Grafana's provisioning reads (stable: sorted keys), in
    Grafana's current dashboard model."""
    data = json.loads(json.dumps(dashboard.to_json_data(), cls=DashboardEncoder))
    return json.dumps(grafana_model(data), indent=2, sort_keys=True) + "\n"


def grafana_model(dashboard: dict) -> dict:
    """grafanalib's JSON in Grafana's current dashboard model (kinds/dashboard in Grafana's
    repository): unset fields left out instead of `null`, the Grafana 4 keys (`LEGACY_KEYS`)
    dropped, and data sources as references (`{"type", "uid"}`) instead of names, the form
    Grafana's own migration (schema version 33) gives them. Grafana loads either; this one
    can be checked against the published schema."""
    model = {k: v for k, v in _without_nulls(dashboard).items()}
    for key in LEGACY_KEYS["dashboard"]:
        model.pop(key, None)
    for key in LEGACY_KEYS["timepicker"]:
        model.get("timepicker", {}).pop(key, None)
    for panel in model.get("panels", []):
        for key in LEGACY_KEYS["panel"]:
            panel.pop(key, None)
        panel["datasource"] = _datasource_ref(panel.get("datasource"))
        for target in panel.get("targets", []):
            target["datasource"] = _datasource_ref(target.get("datasource"))
    for variable in model.get("templating", {}).get("list", []):
        for key in LEGACY_KEYS["variable"]:
            variable.pop(key, None)
        variable.get("current", {}).pop("tags", None)
        if "datasource" in variable:
            variable["datasource"] = _datasource_ref(variable["datasource"])
    return model


def _without_nulls(value):
    if isinstance(value, dict):
        # A threshold's base step keeps `"value": null` (minus infinity; the model requires it).
        keep = {"value"} if "color" in value else set()
        return {k: _without_nulls(v) for k, v in value.items() if v is not None or k in keep}
    if isinstance(value, list):
        return [_without_nulls(item) for item in value]
    return value


def _datasource_ref(name) -> dict:
    """A data source reference: the dashboard's variable by its uid, of Prometheus' type."""
    if isinstance(name, dict):
        return name
    return {"type": "prometheus", "uid": name or DATASOURCE}


def queries(rendered: dict) -> list[str]:
    """Every PromQL query of a rendered dashboard: its panels' targets and its variables."""
    found = [t["expr"] for panel in rendered.get("panels", []) for t in panel.get("targets", [])]
    found += [v["query"] for v in rendered["templating"]["list"] if v.get("type") == "query"]
    return found


def main(argv: list[str] | None = None) -> int:
    """Writes the dashboards; with --check, only says which committed file is stale."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    parser.add_argument("--output-dir", type=Path, default=OUTPUT_DIR)
    args = parser.parse_args(argv)
    stale = []
    for name, build in DASHBOARDS.items():
        target = args.output_dir / name
        text = render(build())
        if args.check:
            if not target.is_file() or target.read_text() != text:
                stale.append(str(target))
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        print(target)
    if stale:
        print(f"stale, run `make monitoring`: {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
