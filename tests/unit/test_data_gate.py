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
