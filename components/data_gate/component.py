"""The data gate: stops a run before training when ExampleValidator found anomalies.

TFX's ExampleValidator records anomalies but lets the pipeline go on to train on bad data. This
component fails instead, so nothing downstream (Trainer, Evaluator, Pusher) runs and the model in
serving stays as it was. Its error lists every anomalous column of every split in one paragraph.
"""

import os

from tensorflow_metadata.proto.v0 import anomalies_pb2
from tfx import v1 as tfx
from tfx.dsl.component.experimental.annotations import InputArtifact, Parameter
from tfx.types import artifact_utils

ANOMALIES_FILE = "SchemaDiff.pb"  # as tfx.components.example_validator.executor writes it


class DataGateError(RuntimeError):
    """The data broke the schema; the message names each column and what is wrong."""


def describe_anomalies(anomalies_by_split: dict[str, anomalies_pb2.Anomalies]) -> list[str]:
    """One 'split/column: what is wrong' string per anomaly, columns sorted."""
    problems = []
    for split, anomalies in sorted(anomalies_by_split.items()):
        for column, info in sorted(anomalies.anomaly_info.items()):
            detail = "; ".join(r.description for r in info.reason) or info.description
            problems.append(f"{column} ({split} split): {info.short_description}: {detail}")
        if anomalies.HasField("dataset_anomaly_info"):
            info = anomalies.dataset_anomaly_info
            problems.append(f"dataset ({split} split): {info.description}")
    return problems


def read_anomalies(artifact) -> dict[str, anomalies_pb2.Anomalies]:
    result = {}
    for split in artifact_utils.decode_split_names(artifact.split_names):
        path = os.path.join(artifact_utils.get_split_uri([artifact], split), ANOMALIES_FILE)
        anomalies = anomalies_pb2.Anomalies()
        with open(path, "rb") as handle:
            anomalies.ParseFromString(handle.read())
        result[split] = anomalies
    return result


@tfx.dsl.components.component
def DataGate(  # noqa: N802 - TFX names components like classes
    anomalies: InputArtifact[tfx.types.standard_artifacts.ExampleAnomalies],
    input_base: Parameter[str],
) -> None:
    """Raises DataGateError listing each anomalous column; passes when there are none."""
    problems = describe_anomalies(read_anomalies(anomalies))
    if problems:
        raise DataGateError(
            f"Data gate: the data in {input_base} does not match the schema, so the run stopped "
            f"before training and nothing was pushed. {len(problems)} anomal"
            f"{'y' if len(problems) == 1 else 'ies'}: " + " | ".join(problems)
        )
