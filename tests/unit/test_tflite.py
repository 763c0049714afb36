"""`push.tflite`: what the spec accepts and refuses, where the converter goes in the chain, how the
Pusher is wired to it, and the converter's own conversion and parity check on a small real
SavedModel (string and float inputs, a lookup table), converted by TF Lite and run in its
interpreter. The whole path through a pipeline is tests/e2e/test_tflite.py."""

from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from components.tflite import executor
from pipelines.core.metadata import ArtifactRecord, NodeArtifacts
from pipelines.core.outcome import Outcome, Reason, RunResult
from pipelines.core.paths import RunPaths
from pipelines.finish.report import render_report
from pipelines.serving_state import versions
from pipelines.spec.loading import SpecError, load_spec
from pipelines.spec.models import DEFAULT_COMPONENTS, TFLITE_DEFAULT_TOLERANCE, TfLiteQuantization


def _types(spec) -> list[str]:
    return [c.type for c in spec.components]


def test_tflite_is_off_by_default_and_the_chain_has_no_converter():
    spec = load_spec("penguin", env="ci").spec
    assert not spec.push.tflite.enabled
    assert _types(spec) == list(DEFAULT_COMPONENTS)


@pytest.mark.parametrize(
    ("overrides", "tolerance"),
    [
        ([], 1e-4),  # float32: TF Lite's kernels agree with TensorFlow's to about 1e-7
        (["push.tflite.quantization=dynamic"], 0.02),
        (["push.tflite.quantization=float16"], 0.02),
        (["push.tflite.quantization=float16", "push.tflite.tolerance=0"], 0.0),
    ],
)
def test_the_tolerance_defaults_by_quantization_and_reaches_the_converter(
    overrides, tolerance, tmp_path
):
    from pipelines.builder.pipeline import build_pipeline

    overrides = ["push.tflite.enabled=true", *overrides]
    spec = load_spec("penguin", env="ci", overrides=overrides).spec
    assert spec.push.tflite.max_difference == tolerance
    [converter] = [
        n for n in build_pipeline(spec, tmp_path).components if n.id == "tflite_converter"
    ]
    assert converter.exec_properties["tolerance"] == tolerance


@pytest.mark.parametrize("name", ["penguin", "taxi"])
def test_enabling_puts_the_converter_just_before_the_pusher(name):
    # penguin has the reference chain, taxi lists its own: the one switch works for both.
    before = _types(load_spec(name, env="ci").spec)
    spec = load_spec(name, env="ci", overrides=["push.tflite.enabled=true"]).spec
    at = before.index("pusher")
    assert _types(spec) == [*before[:at], "tflite_converter", *before[at:]]


def test_a_listed_converter_keeps_its_place_and_id():
    chain = ", ".join(f"{{type: {t}}}" for t in DEFAULT_COMPONENTS[:-2])
    listed = f"components=[{chain}, {{type: tflite_converter, id: to_tflite}}, {{type: pusher}}]"
    spec = load_spec("penguin", overrides=["push.tflite.enabled=true", listed]).spec
    assert [c.id for c in spec.components][-3:] == ["evaluator", "to_tflite", "pusher"]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("push.tflite.quantization=int8", "push.tflite.quantization: Input should be 'none', "),
        ("push.tflite.tolerance=-0.1", "push.tflite.tolerance: Input should be greater than"),
        ("push.tflite.parity_rows=0", "push.tflite.parity_rows: Input should be greater than"),
        ("push.tflite.required=maybe", "push.tflite.required: Input should be a valid boolean"),
        ("push.tflite.quantisation=float16", "push.tflite.quantisation: unknown key"),
    ],
)
def test_bad_values_are_refused_naming_the_key(override, message):
    with pytest.raises(SpecError) as err:
        load_spec("penguin", overrides=[override])
    assert f"--set {override}: {message}" in str(err.value)


def test_a_listed_converter_without_enabling_it_is_refused():
    chain = ", ".join(f"{{type: {t}}}" for t in DEFAULT_COMPONENTS[:-1])
    with pytest.raises(SpecError) as err:
        load_spec("penguin", overrides=[f"components=[{chain}, {{type: tflite_converter}}]"])
    assert "a `tflite_converter` component needs push.tflite.enabled: true" in str(err.value)


def test_a_converter_after_the_pusher_is_refused_by_the_wiring_check():
    chain = ", ".join(f"{{type: {t}}}" for t in DEFAULT_COMPONENTS)
    with pytest.raises(SpecError) as err:
        load_spec(
            "penguin",
            overrides=[
                "push.tflite.enabled=true",
                f"components=[{chain}, {{type: tflite_converter}}]",
            ],
        )
    assert (
        "(pusher): needs 'tflite_model' (because of push.tflite.enabled), which no earlier "
        "component provides; list one of ['tflite_converter'] before it"
    ) in str(err.value)


def test_the_pusher_reads_the_converter_and_the_required_switch(tmp_path):
    from pipelines.builder.pipeline import build_pipeline

    overrides = ["push.tflite.enabled=true", "push.tflite.required=true"]
    spec = load_spec("penguin", env="ci", overrides=overrides).spec
    nodes = {n.id: n for n in build_pipeline(spec, tmp_path).components}
    converter, pusher = nodes["tflite_converter"], nodes["pusher"]
    assert pusher.inputs["tflite_model"].producer_component_id == "tflite_converter"
    assert converter.inputs["infra_blessing"].producer_component_id == "infra_validator"
    assert '"tflite_required": true' in pusher.exec_properties["custom_config"]
    assert converter.exec_properties["metric"] == "SparseCategoricalAccuracy"
    # Without a converter the Pusher's configuration is as before: its cache key is unchanged.
    plain = build_pipeline(load_spec("penguin", env="ci").spec, tmp_path / "plain")
    [plain_pusher] = [n for n in plain.components if n.id == "pusher"]
    assert "tflite" not in plain_pusher.exec_properties["custom_config"]


def test_a_version_is_published_with_its_extra_files_in_the_same_rename(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "saved_model.pb").write_bytes(b"graph")
    flatbuffer = tmp_path / "model.tflite"
    flatbuffer.write_bytes(b"TFL3")
    base = tmp_path / "serving"
    version, target = versions.publish(
        str(model), str(base), {}, extra_files={"model.tflite": str(flatbuffer)}
    )
    assert version == 1
    assert (Path(target) / "model.tflite").read_bytes() == b"TFL3"
    assert (Path(target) / "saved_model.pb").read_bytes() == b"graph"
    assert versions.leftovers(str(base)) == []


def test_only_a_model_both_gates_blessed_is_converted():
    from tfx.types import standard_artifacts

    model, infra = standard_artifacts.ModelBlessing(), standard_artifacts.InfraBlessing()
    inputs = {"model_blessing": [model], "infra_blessing": [infra]}
    for blessed, why in [
        ((0, 1), "the Evaluator did not bless the model"),
        ((1, 0), "infra validation did not bless the model"),
        ((1, 1), None),
    ]:
        model.set_int_custom_property("blessed", blessed[0])
        infra.set_int_custom_property("blessed", blessed[1])
        assert executor.not_blessed(inputs) == why


def test_the_pusher_takes_model_tflite_only_from_a_passing_conversion(tmp_path):
    from components.tflite.artifact import TFLiteModel, tflite_verdict

    converted = TFLiteModel()
    converted.uri = str(tmp_path)
    converted.set_int_custom_property("passed", 0)
    converted.set_string_custom_property("conveyor_reason", "drift: ...")
    assert tflite_verdict({}) is None  # no converter in the pipeline
    assert tflite_verdict({"tflite_model": [converted]}) == (None, "drift: ...")
    converted.set_int_custom_property("passed", 1)
    assert tflite_verdict({"tflite_model": [converted]}) == (
        str(tmp_path / "model.tflite"),
        "drift: ...",
    )


def test_a_required_tflite_refusal_alerts_like_an_infra_refusal():
    result = RunResult(
        run_id="r",
        pipeline="penguin",
        outcome=Outcome.NOT_PUSHED,
        message="the TF Lite model did not pass (push.tflite.required): drift",
        reason=Reason.TFLITE_REFUSED,
    )
    assert result.alerts


# --- the converter on a small real SavedModel -----------------------------------------------------


class _Scorer(tf.Module):
    """Two raw columns (a category through a lookup table, a number) -> three probabilities,
    class ids and class names: the shape of Conveyor's `serving_default`."""

    def __init__(self):
        super().__init__()
        self.table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(["Biscoe", "Dream", "Torgersen"]), tf.constant([0, 1, 2], tf.int64)
            ),
            default_value=-1,
        )
        rng = np.random.default_rng(7)
        self.kernel = tf.Variable(rng.normal(size=(4, 3)).astype(np.float32) * 0.37)
        self.classes = tf.constant(["Adelie", "Chinstrap", "Gentoo"])

    @tf.function(
        input_signature=[
            tf.TensorSpec([None], tf.string, name="island"),
            tf.TensorSpec([None], tf.float32, name="bill_length_mm"),
        ]
    )
    def serve(self, island, bill_length_mm):
        one_hot = tf.one_hot(self.table.lookup(island), 3)
        features = tf.concat([one_hot, (bill_length_mm[:, None] - 44.0) / 5.0], axis=1)
        probabilities = tf.nn.softmax(tf.matmul(features, self.kernel))
        class_ids = tf.argmax(probabilities, axis=1)
        return {
            "probabilities": probabilities,
            "class_ids": class_ids,
            "classes": tf.gather(self.classes, class_ids),
        }


def _example(island: str, bill: float | None) -> bytes:
    feature = {"island": tf.train.Feature(bytes_list=tf.train.BytesList(value=[island.encode()]))}
    if bill is not None:
        feature["bill_length_mm"] = tf.train.Feature(float_list=tf.train.FloatList(value=[bill]))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


@pytest.fixture(scope="module")
def scorer(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("scorer") / "model"
    module = _Scorer()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})
    return str(path)


ROWS = [
    _example(island, bill)
    for island in ("Biscoe", "Dream", "Torgersen", "Atlantis")
    for bill in (35.5, 44.0, 51.25, None)
]


@pytest.mark.parametrize("quantization", ["none", "dynamic", "float16"])
def test_the_converted_model_answers_as_the_savedmodel_within_the_default_tolerance(
    scorer, quantization
):
    tolerance = TFLITE_DEFAULT_TOLERANCE[TfLiteQuantization(quantization)]
    flatbuffer = executor.convert(scorer, quantization)
    parity = executor.Parity(quantization=quantization, tolerance=tolerance)
    executor.compare(scorer, flatbuffer, ROWS, "", parity)
    assert parity.parity_rows == len(ROWS)
    assert parity.worst_output == "probabilities"
    assert 0 <= parity.max_abs_difference <= tolerance
    assert parity.agreement == 1.0  # class ids and names, row by row
    # No `transform_features` signature to read the label with: said, not guessed.
    assert parity.metric is None
    assert "no metric" in parity.notes[0]


def test_float16_weights_move_the_answers_off_exact(scorer):
    parity = executor.Parity(quantization="float16", tolerance=0.0)
    executor.compare(scorer, executor.convert(scorer, "float16"), ROWS, "", parity)
    assert parity.max_abs_difference > 0.0  # what makes tolerance 0 a reliable drift


def test_a_model_the_converter_refuses_is_a_reason_not_a_crash(tmp_path):
    (tmp_path / "saved_model.pb").write_bytes(b"not a SavedModel")
    with pytest.raises(executor.ParityError, match="conversion failed: OSError: Cannot parse"):
        executor.convert(str(tmp_path), "none")


def test_differences_treat_nan_as_equal_only_to_nan():
    parity = executor.Parity(quantization="none", tolerance=0.0)
    saved = {"predictions": np.array([[1.0], [np.nan]]), "class_ids": np.array([0, 1])}
    lite = {"predictions": np.array([[1.0], [np.nan]]), "class_ids": np.array([0, 2])}
    executor._differences(saved, lite, parity)
    assert parity.max_abs_difference == 0.0 and parity.agreement == 0.5
    executor._differences(saved, {**lite, "predictions": np.array([[1.0], [2.0]])}, parity)
    assert parity.max_abs_difference == np.inf


def test_the_report_shows_the_verdict_the_figures_and_what_the_push_did(tmp_path):
    paths = RunPaths(workdir=tmp_path, spec=load_spec("penguin", env="ci").spec)
    converted = ArtifactRecord(
        7,
        "TFLiteModel",
        "/tflite_converter/tflite_model/7",
        custom_properties={
            "passed": 0,
            "conveyor_reason": "drift: up to 0.0123 over the tolerance 0.001",
            "quantization": "float16",
            "size_bytes": 14952,
            "max_abs_difference": "0.0123",
            "tolerance": "0.001",
            "worst_output": "probabilities",
            "metric": "SparseCategoricalAccuracy",
            "metric_savedmodel": 0.97,
            "metric_tflite": 0.96,
            "metric_delta": -0.01,
        },
    )
    pushed = ArtifactRecord(
        8,
        "PushedModel",
        "/pusher/pushed_model/8",
        custom_properties={"pushed": 1, "pushed_version": "2", "conveyor_tflite": "without x"},
    )
    nodes = {
        "tflite_converter": NodeArtifacts("tflite_converter", "executed", {}, {"t": [converted]}),
        "pusher": NodeArtifacts("pusher", "executed", {}, {"p": [pushed]}),
    }
    run_dir = paths.run_dir("r")
    run_dir.mkdir(parents=True)
    result = RunResult("r", "penguin", Outcome.PUSHED, "pushed version 2", run_dir=str(run_dir))

    page = render_report(result, paths, nodes)

    assert (
        '<tr><td>TF Lite</td><td><span class="badge warn">not passed</span> drift: up to 0.0123 '
        "over the tolerance 0.001</td></tr>"
    ) in page
    assert "<h2>TF Lite</h2>" in page and "In the push: without x." in page
    assert "<td>SparseCategoricalAccuracy: TF Lite minus SavedModel</td>" in page
    assert "<td>0.0123 (probabilities)</td>" in page
