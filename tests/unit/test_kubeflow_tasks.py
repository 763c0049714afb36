"""What executing the compiled Kubeflow job found (tests/e2e/test_kubeflow_run.py runs it whole),
each bug's failing case at unit scale: a custom artifact type TFX's entry point could not import,
the data gate writing into a folder nobody creates, and an open-source KFP final status taken
for a failure."""

import json

import pytest
from google.protobuf import json_format

from components.data_gate.component import DataGateFindings, write_findings
from pipelines.core.artifact_files import GATE_FINDINGS_FILE
from pipelines.run.kubeflow_entrypoint import (
    artifact_type_flag,
    register_artifact_types,
    split_arguments,
)

FINDINGS_CLASS = "components.data_gate.component.DataGateFindings"


def _findings_artifact():
    """The data gate's output artifact as a Kubeflow task receives it in its executor input."""
    from kfp.pipeline_spec import pipeline_spec_pb2
    from tfx.orchestration.kubeflow.v2 import compiler_utils

    runtime_artifact = pipeline_spec_pb2.RuntimeArtifact(name="findings", uri="/tmp/findings")
    runtime_artifact.type.instance_schema = compiler_utils.get_artifact_schema(DataGateFindings)
    listed = pipeline_spec_pb2.ArtifactList(artifacts=[runtime_artifact])
    return {"findings": listed}


def test_the_data_gate_artifact_is_parsed_once_its_title_is_registered(monkeypatch):
    from tfx.orchestration.kubeflow.v2 import compiler_utils
    from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_entrypoint_utils as entry

    table = dict(compiler_utils.TITLE_TO_CLASS_PATH)
    monkeypatch.setattr(compiler_utils, "TITLE_TO_CLASS_PATH", table)
    # KFP accepts the title only as `namespace.Name`, which is not an import path.
    with pytest.raises(ImportError, match="Could not import conveyor.DataGateFindings"):
        entry.parse_raw_artifact_dict(_findings_artifact())
    register_artifact_types({DataGateFindings.TYPE_NAME: FINDINGS_CLASS})
    (parsed,) = entry.parse_raw_artifact_dict(_findings_artifact())["findings"]
    assert isinstance(parsed, DataGateFindings)
    assert parsed.uri == "/tmp/findings"


def test_the_entry_point_takes_its_flags_and_passes_tfx_the_rest():
    argv = [
        artifact_type_flag("conveyor.DataGateFindings", FINDINGS_CLASS),
        "--executor_class_path",
        "components.data_gate.component.DataGate_Executor",
        "--json_serialized_invocation_args",
        "{}",
        "--direct_num_workers=1",
    ]
    types, rest = split_arguments(argv)
    assert types == {"conveyor.DataGateFindings": FINDINGS_CLASS}
    assert rest == argv[1:]


def test_the_findings_folder_is_created_where_nobody_made_it(tmp_path):
    # Kubeflow's entry point hands the gate an output URI whose folder does not exist.
    uri = tmp_path / "pipeline_root" / "data_gate" / "a1b2" / "findings"
    write_findings(str(uri), {"passed": True, "anomalies": []})
    assert json.loads((uri / GATE_FINDINGS_FILE).read_text()) == {"passed": True, "anomalies": []}


def _status(state: str, message: str = "") -> str:
    from kfp.pipeline_spec import pipeline_spec_pb2

    status = pipeline_spec_pb2.PipelineTaskFinalStatus(
        state=state, pipeline_job_resource_name="penguin-1", pipeline_task_name="tfx-dag"
    )
    status.error.message = message
    return json_format.MessageToJson(status)


@pytest.mark.parametrize("state", ["SUCCEEDED", "COMPLETE"])
def test_a_run_that_succeeded_is_not_a_failure_in_either_vocabulary(state):
    # Open-source KFP's driver hands the exit handler the DAG's ML Metadata state (`COMPLETE`),
    # Vertex AI a task state (`SUCCEEDED`); the first was read as a failed run.
    from components.run_finish.component import final_status_stop, parse_final_status

    assert final_status_stop(parse_final_status(_status(state))) is None


@pytest.mark.parametrize("state", ["CANCELLED", "CANCELED"])
def test_a_cancelled_run_is_interrupted_in_either_vocabulary(state):
    from components.run_finish.component import final_status_stop, parse_final_status
    from pipelines.core.outcome import Reason

    stop = final_status_stop(parse_final_status(_status(state)))
    assert stop.reason is Reason.INTERRUPTED
    assert f"ended {state}" in stop.message
