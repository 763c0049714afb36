"""The data gate's message names every anomalous column and split."""

from tensorflow_metadata.proto.v0 import anomalies_pb2

from components.data_gate.component import describe_anomalies


def test_each_anomalous_column_is_listed_with_its_split_and_reason():
    anomalies = anomalies_pb2.Anomalies()
    info = anomalies.anomaly_info["body_mass_g"]
    info.short_description = "Unexpected data type"
    info.reason.add(description="Expected data of type: FLOAT but got BYTES")
    dropped = anomalies.anomaly_info["flipper_length_mm"]
    dropped.short_description = "Column dropped"
    dropped.reason.add(description="Column is completely missing")

    assert describe_anomalies({"train": anomalies}) == [
        "body_mass_g (train split): Unexpected data type: "
        "Expected data of type: FLOAT but got BYTES",
        "flipper_length_mm (train split): Column dropped: Column is completely missing",
    ]


def test_no_anomalies_no_problems():
    assert describe_anomalies({"train": anomalies_pb2.Anomalies()}) == []


def test_a_refusal_on_kubeflow_reaches_the_exit_handler_by_the_jobs_name(tmp_path):
    """The gate writes its verdict into the run's folder named as the exit handler names it
    from KFP's final status; the exit handler reads it back as BLOCKED with the findings."""
    from components.data_gate.component import DataGateError, write_verdict
    from components.run_finish.component import gate_verdict_stop
    from pipelines.core.outcome import Outcome, Reason
    from pipelines.core.paths import RunPaths
    from pipelines.spec.loading import load_spec

    paths = RunPaths(workdir=tmp_path, spec=load_spec("penguin", env="ci").spec)
    findings = {"anomalies": [{"column": "sex", "split": "train", "description": "missing"}]}
    error = DataGateError("Data gate: sex is missing", findings)
    unresolved = write_verdict(
        str(paths.runs_dir), "{{$.pipeline_job_name}}", "{{$.pipeline_job_resource_name}}", error
    )
    assert unresolved is None  # no name to meet the exit handler by: nothing written
    assert gate_verdict_stop(paths, "night-3") is None
    resource = "projects/p/locations/l/pipelineJobs/night-3"
    written = write_verdict(str(paths.runs_dir), "night-3-display", resource, error)
    assert written == str(paths.run_dir("night-3") / "data_gate_verdict.json")
    stop = gate_verdict_stop(paths, "night-3")
    assert stop.reason is Reason.DATA_GATE_BLOCKED and stop.outcome is Outcome.BLOCKED
    assert stop.message == "Data gate: sex is missing"
    assert stop.findings == findings
