"""`data.format: bigquery` is a compile-only profile: the spec compiles for Kubeflow with TFX's
BigQueryExampleGen reading `data.query` (no cluster, no BigQuery needed); `conveyor run` is
refused in tests/unit/test_input_formats_spec.py."""

import json

from pipelines import cli
from pipelines.run.kubeflow import job_tasks

QUERY = "SELECT * FROM `bigquery-public-data.ml_datasets.penguins`"


def test_bigquery_spec_compiles_for_kubeflow_with_bigquery_example_gen(tmp_path):
    output = tmp_path / "penguin.json"
    argv = ["compile", "penguin", "--env", "kubeflow", "--output", str(output)]
    argv += ["--set", "data.format=bigquery", "--set", f"data.query={QUERY}"]
    assert cli.main([*argv, "--workdir", str(tmp_path)]) == 0
    job = json.loads(output.read_text())
    pipeline = job["pipelineSpec"]
    executors = pipeline["deploymentSpec"]["executors"]
    example_gen = pipeline["components"]["csv_example_gen"]["executorLabel"]
    container = json.dumps(executors[example_gen]["container"])
    assert "tfx.extensions.google_cloud_big_query.example_gen.executor.Executor" in container
    # TFX's BigQueryExampleGen carries the query as its one input split's pattern.
    parameters = job_tasks(pipeline)["csv_example_gen"]["inputs"]["parameters"]
    # Schema 2.1.0 (what open-source KFP accepts) gives a constant as a protobuf Value.
    input_config = json.loads(parameters["input_config"]["runtimeValue"]["constant"])
    assert input_config["splits"][0]["pattern"] == QUERY
