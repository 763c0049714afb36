"""TF Serving's `classification` and `regression` signatures in Conveyor's export.

A regressor and a binary classifier are built and exported with the trainer's own code
(`components/trainer/model.py`: Preprocessor, build_network, ServingModule, export), untrained
(the answers only have to agree with each other). Their saved_model.pb is read back as a
`saved_model_pb2.SavedModel`: the new signatures carry TF Serving's method names and shapes,
`serving_default` is still a predict signature. A real model server then answers `:regress`
and `:classify` in TF Serving's documented shape, equal to `serving_default`'s `:predict`.
(Penguin's pushed multi-class model is classified in tests/e2e/test_serving_penguin.py.)
"""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf import text_format

from pipelines.serving_state.config_files import ServedModel, models_config
from tests.serving_server import serving

ROWS = [
    {"x": 1.5, "colour": "red"},
    {"x": -3.0, "colour": "blue"},
    {"x": 0.25, "colour": "green"},  # out of the vocabulary
]


def _export(path, label) -> None:
    from components.trainer.features import DType, FeatureInfo, FeatureSet
    from components.trainer.model import Preprocessor, ServingModule, build_network, export

    features = FeatureSet(
        features=(
            FeatureInfo("x", "numeric", DType.FLOAT, mean=1.0, std=2.0),
            FeatureInfo("colour", "categorical", DType.STRING, vocabulary=("red", "blue")),
        ),
        label=label,
    )
    preprocessor = Preprocessor(features)
    network = build_network(preprocessor.width, label, (4,), 0.0)
    export(ServingModule(features, preprocessor, network), str(path), {"hidden_units": [4]})


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from components.trainer.features import DType, LabelInfo

    root = tmp_path_factory.mktemp("tf_serving_signatures")
    _export(root / "fare" / "1", LabelInfo("fare", "regression", DType.FLOAT))
    _export(root / "tips" / "1", LabelInfo("tips", "classification", DType.STRING, ("no", "yes")))
    return root


def _signature_defs(version_dir) -> dict:
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel.FromString((version_dir / "saved_model.pb").read_bytes())
    [meta_graph] = saved.meta_graphs
    return meta_graph.signature_def


def test_the_signatures_carry_tf_serving_method_names_and_shapes(exported):
    fare = _signature_defs(exported / "fare" / "1")
    assert fare["regression"].method_name == "tensorflow/serving/regress"
    assert fare["serving_default"].method_name == "tensorflow/serving/predict"
    assert "classification" not in fare
    [(name, tensor)] = fare["regression"].inputs.items()
    assert name == "inputs" and tensor.dtype == 7  # DT_STRING
    [(name, tensor)] = fare["regression"].outputs.items()
    assert name == "outputs" and tensor.dtype == 1  # DT_FLOAT
    assert [d.size for d in tensor.tensor_shape.dim] == [-1, 1]

    tips = _signature_defs(exported / "tips" / "1")
    classification = tips["classification"]
    assert classification.method_name == "tensorflow/serving/classify"
    assert list(classification.inputs) == ["inputs"]
    assert {k: v.dtype for k, v in classification.outputs.items()} == {"classes": 7, "scores": 1}
    for output in classification.outputs.values():
        assert [d.size for d in output.tensor_shape.dim] == [-1, 2]
    # The signatures TFMA, the infra validator and the Evaluator read are as before.
    assert {"serving_default", "serving_examples", "transform_features"} <= set(tips)


@pytest.fixture(scope="module")
def server(exported):
    config = exported / "models.config"
    models = [ServedModel(n, str(exported / n), policy="latest") for n in ("fare", "tips")]
    config.write_text(text_format.MessageToString(models_config(models)))
    with serving(["--model-config-file", str(config)], exported / "server") as running:
        yield running


def _predict(server, model: str) -> dict:
    response = server.post(f"/v1/models/{model}:predict", {"instances": ROWS})
    assert response.status_code == 200, response.text
    predictions = response.json()["predictions"]
    if not isinstance(predictions[0], dict):  # a one-output signature answers bare values
        return {"predictions": np.array(predictions)}
    return {name: np.array([p[name] for p in predictions]) for name in predictions[0]}


def test_regress_answers_as_tf_serving_documents_it_equal_to_predict(server):
    body = {"signature_name": "regression", "examples": ROWS}
    response = server.post("/v1/models/fare:regress", body)
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert isinstance(results, list) and all(isinstance(v, float) for v in results)
    predicted = _predict(server, "fare")["predictions"]
    np.testing.assert_allclose(results, predicted.reshape(-1), rtol=1e-6)


def test_classify_answers_as_tf_serving_documents_it_equal_to_predict(server):
    body = {"signature_name": "classification", "examples": ROWS}
    response = server.post("/v1/models/tips/versions/1:classify", body)
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [[label for label, _ in row] for row in results] == [["no", "yes"]] * len(ROWS)
    predicted = _predict(server, "tips")["probabilities"].reshape(-1)
    scores = np.array([[score for _, score in row] for row in results])
    np.testing.assert_allclose(scores[:, 1], predicted, rtol=1e-6)
    np.testing.assert_allclose(scores.sum(axis=1), 1.0, rtol=1e-6)
