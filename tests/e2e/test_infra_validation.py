"""Infra validation for real: the candidate served by a fresh `pipelines.serving.model_server`
process, through the runner the spec names.

The executor, run directly on SavedModels written here (real processes on 127.0.0.1):
- a sound model is blessed, and its model server is gone afterwards; the InfraBlessing names
  Conveyor's server (the default runner);
- through the `tensorflow_model_server` runner, Conveyor's server started by TF Serving's own
  flags (a `tensorflow_model_server` program on a path the choice names, which hands its
  command line to `python -m pipelines.serving.model_server`: swapping in the real binary is
  that path) blesses the sound model and refuses a broken one, and serves TF Serving's own
  half_plus_two test model as TF Serving's docs answer;
- a model whose serving signature answers NaN, one that answers one row for a whole batch, and
  one too slow for its latency budget (an in-graph sleep: a `tf.py_function` could not be served
  by another process at all) are not blessed, each with its named reason;
- a server that is not ready in time is stopped, and one that exits at start is quoted, each
  with the tail of its output in the reason;
- a model the Evaluator did not bless is not served at all;
- a spare server process started early (spare.py) serves the candidate and is gone afterwards;
  a spare that died is passed over (a fresh process serves instead), an unused one discarded.
Then penguin under the `ci` profile, in one working directory: a run pushes version 1 with an
InfraBlessing blessed=1 in ML Metadata, served by the spare the run started when its trainer
node executed, the blessing and the report naming Conveyor's server; a run with
`push.latency_budget_ms=0.001` pushes nothing, version 1 stays byte
for byte, and the reason is in the run's verdict, summary, report and ML Metadata.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from components.infra_validator import executor as infra
from components.infra_validator import spare
from components.infra_validator.runners.base import ServerChoice
from components.infra_validator.runners.local import BinaryRunner, ConveyorRunner
from pipelines.core import metadata
from pipelines.core.paths import REPORT_FILE, RUN_LOG, RUN_SUMMARY, RunPaths
from pipelines.ops import nightly
from pipelines.serving_state.versions import model_digest
from pipelines.spec.loading import load_spec
from tests.conftest import penguin_ci_run, recording_webhook, run_artifacts

MODEL_NAME = "toy"
ROWS = [(0.5, b"a"), (-1.5, b"b"), (float("nan"), b""), (2.0, b"a"), (0.25, b"c")]


def _example(x: float, s: bytes) -> bytes:
    import tensorflow as tf

    features = {"s": tf.train.Feature(bytes_list=tf.train.BytesList(value=[s] if s else []))}
    if x == x:  # NaN: the feature is written with no value, as TFX's CSV decoding does
        features["x"] = tf.train.Feature(float_list=tf.train.FloatList(value=[x]))
    else:
        features["x"] = tf.train.Feature(float_list=tf.train.FloatList(value=[]))
    return tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString()


def _save_toy_model(path: Path, flaw: str | None = None) -> None:
    """A two-class model with the trainer's signatures (`serving_default` on raw columns x and
    s, `serving_examples` on tf.Examples); `flaw` breaks its serving as a real bug would."""
    import tensorflow as tf
    from tensorflow.python.data.experimental.ops import testing as data_testing

    class Toy(tf.Module):
        def __init__(self):
            super().__init__()
            self.weight = tf.Variable([[1.0, -1.0]])

        def _predict(self, x, s):
            x = tf.where(tf.math.is_nan(x), tf.zeros_like(x), x)
            bonus = tf.cast(tf.equal(s, "a"), tf.float32)
            logits = (x + bonus)[:, None] * self.weight
            probabilities = tf.nn.softmax(logits)
            if flaw == "nan":
                probabilities = probabilities * float("nan")
            elif flaw == "one_row":  # a reduction over the batch where a row's was meant
                probabilities = tf.reduce_mean(probabilities, axis=0, keepdims=True)
            elif flaw == "slow":  # 200 ms inside the graph, so the served model is slow too
                probabilities = (
                    tf.data.Dataset.from_tensors(probabilities)
                    .apply(data_testing.sleep(200_000))
                    .get_single_element()
                )
            class_ids = tf.argmax(probabilities, axis=1)
            return {
                "probabilities": probabilities,
                "class_ids": class_ids,
                "classes": tf.gather(tf.constant(["no", "yes"]), class_ids),
            }

        @tf.function(
            input_signature=[
                tf.TensorSpec([None], tf.float32, name="x"),
                tf.TensorSpec([None], tf.string, name="s"),
            ]
        )
        def serve(self, x, s):
            return self._predict(x, s)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
        def serve_examples(self, examples):
            parsed = tf.io.parse_example(
                examples,
                {"x": tf.io.RaggedFeature(tf.float32), "s": tf.io.RaggedFeature(tf.string)},
            )
            x = parsed["x"].to_tensor(default_value=float("nan"), shape=[None, 1])[:, 0]
            s = parsed["s"].to_tensor(default_value="", shape=[None, 1])[:, 0]
            outputs = self._predict(x, s)
            outputs.pop("classes")
            return outputs

    module = Toy()
    tf.saved_model.save(
        module,
        str(path),
        signatures={"serving_default": module.serve, "serving_examples": module.serve_examples},
    )


@pytest.fixture(scope="module")
def examples_artifact(tmp_path_factory):
    import tensorflow as tf
    from tfx.types import artifact_utils, standard_artifacts

    root = tmp_path_factory.mktemp("examples")
    for split in ("train", "eval"):
        (root / f"Split-{split}").mkdir()
        options = tf.io.TFRecordOptions(compression_type="GZIP")
        with tf.io.TFRecordWriter(str(root / f"Split-{split}" / "data.gz"), options) as writer:
            for x, s in ROWS:
                writer.write(_example(x, s))
    examples = standard_artifacts.Examples()
    examples.uri = str(root)
    examples.split_names = artifact_utils.encode_split_names(["train", "eval"])
    return examples


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Model directories as the Trainer writes them (`<uri>/Format-Serving`), by flaw."""
    root = tmp_path_factory.mktemp("models")
    uris = {}
    for flaw in ("sound", "nan", "one_row", "slow"):
        uri = root / flaw
        _save_toy_model(uri / "Format-Serving", None if flaw == "sound" else flaw)
        uris[flaw] = uri
    return uris


def _validate(
    tmp_path: Path,
    model_uri: Path,
    examples,
    *,
    evaluator_blessed: int = 1,
    budget_ms: float = 250.0,
    requests: int = 4,
    start_timeout: float = 120.0,
    server: ServerChoice | None = None,
):
    """Runs the executor as TFX would and returns the InfraBlessing and its findings."""
    from tfx.types import standard_artifacts

    model = standard_artifacts.Model()
    model.uri = str(model_uri)
    model_blessing = standard_artifacts.ModelBlessing()
    model_blessing.uri = str(tmp_path / "model_blessing")
    model_blessing.set_int_custom_property("blessed", evaluator_blessed)
    output = standard_artifacts.InfraBlessing()
    output.uri = str(tmp_path / "infra_blessing")
    os.makedirs(output.uri)
    infra.Executor().Do(
        {"model": [model], "model_blessing": [model_blessing], "examples": [examples]},
        {"blessing": [output]},
        {
            infra.MODEL_NAME_KEY: MODEL_NAME,
            infra.LATENCY_BUDGET_KEY: budget_ms,
            infra.CANARY_REQUESTS_KEY: requests,
            infra.START_TIMEOUT_KEY: start_timeout,
            **({infra.SERVER_KEY: server.to_json()} if server else {}),
        },
    )
    result_file = Path(output.uri) / infra.RESULT_FILE
    findings = json.loads(result_file.read_text()) if result_file.exists() else {}
    return output, findings


def _verdict(output) -> tuple[int, str]:
    return (
        output.get_int_custom_property("blessed"),
        output.get_string_custom_property("conveyor_reason"),
    )


def _gone(pid: int | None) -> bool:
    return pid is not None and not Path(f"/proc/{pid}").exists()


def test_a_sound_model_is_blessed_and_its_server_is_gone(tmp_path, models, examples_artifact):
    output, findings = _validate(tmp_path, models["sound"], examples_artifact)
    blessed, reason = _verdict(output)
    assert blessed == 1, reason
    assert (Path(output.uri) / "INFRA_BLESSED").exists()
    # Every row in every format: rows, columns and tf.Examples.
    assert findings["requests"] == 4 * 3 and len(findings["formats"]) == 3
    assert reason.startswith("served 12 canary requests")
    assert 0 < findings["latency_ms"]["p99"] <= 250
    assert _gone(findings["server_pid"])
    # Checked by Conveyor's own server, the default runner.
    assert output.get_string_custom_property("conveyor_infra_server") == "conveyor"
    assert findings["server"] == "conveyor"
    assert output.get_string_custom_property("conveyor_infra_server_description").startswith(
        "Conveyor's model server"
    )


# --- the tensorflow_model_server runner --------------------------------------------------------


@pytest.fixture()
def model_server_binary(tmp_path):
    """A `tensorflow_model_server` that is Conveyor's server: it records the command line it was
    given, then runs `python -m pipelines.serving.model_server` with it unchanged."""
    import sys

    program = tmp_path / "bin" / "tensorflow_model_server"
    program.parent.mkdir()
    given = tmp_path / "given_flags"
    program.write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n" "$@" > "{given}"\n'
        f'exec "{sys.executable}" -m pipelines.serving.model_server "$@"\n'
    )
    program.chmod(0o755)
    return program, given


def test_tf_serving_s_flags_start_conveyor_s_server_and_bless_a_sound_model(
    tmp_path, models, examples_artifact, model_server_binary
):
    program, given = model_server_binary
    choice = ServerChoice(kind="tensorflow_model_server", binary_path=str(program))
    output, findings = _validate(tmp_path, models["sound"], examples_artifact, server=choice)
    blessed, reason = _verdict(output)
    assert blessed == 1, reason
    assert reason.startswith("served 12 canary requests")
    # Started with tensorflow_model_server's own flags, nothing else.
    flags = given.read_text().split()
    assert [f.split("=")[0] for f in flags] == [
        "--port",
        "--rest_api_port",
        "--model_name",
        "--model_base_path",
    ]
    assert f"--model_name={MODEL_NAME}" in flags
    assert output.get_string_custom_property("conveyor_infra_server") == "tensorflow_model_server"
    assert output.get_string_custom_property("conveyor_infra_server_description") == (
        f"tensorflow_model_server ({program})"
    )
    assert findings["server"] == "tensorflow_model_server"
    assert _gone(findings["server_pid"])


def test_through_the_binary_a_broken_model_is_still_refused(
    tmp_path, models, examples_artifact, model_server_binary
):
    program, _ = model_server_binary
    choice = ServerChoice(kind="tensorflow_model_server", binary_path=str(program))
    output, findings = _validate(tmp_path, models["nan"], examples_artifact, server=choice)
    blessed, reason = _verdict(output)
    assert blessed == 0 and "is not finite" in reason, reason
    assert output.get_string_custom_property("conveyor_infra_server") == "tensorflow_model_server"
    assert _gone(findings["server_pid"])


def test_the_binary_runner_serves_tf_serving_s_half_plus_two(tmp_path, model_server_binary):
    import httpx

    from tests.half_plus_two import write_half_plus_two

    program, _ = model_server_binary
    base_path = tmp_path / "models" / "half_plus_two"
    write_half_plus_two(base_path / "1")
    runner = BinaryRunner(str(program), "half_plus_two", base_path, tmp_path)
    runner.start()
    try:
        runner.wait_until_running(120)
        answer = httpx.post(
            f"{runner.get_endpoint()}/v1/models/half_plus_two:predict",
            json={"instances": [1.0, 2.0, 5.0]},
            timeout=30,
        )
    finally:
        runner.stop()
    # TF Serving's REST tutorial: y = 0.5 x + 2.
    assert answer.status_code == 200 and answer.json() == {"predictions": [2.5, 3.0, 4.5]}
    assert _gone(runner.pid)


def test_a_spare_started_early_serves_the_candidate_and_is_gone(
    tmp_path, models, examples_artifact
):
    spare.start()  # as a local run does when its trainer executes
    pid = spare.waiting_pid()
    output, findings = _validate(tmp_path, models["sound"], examples_artifact)
    blessed, reason = _verdict(output)
    assert blessed == 1, reason
    assert findings["server_pid"] == pid and spare.waiting_pid() is None
    assert _gone(pid)


def test_a_dead_spare_is_passed_over_and_an_unused_one_discarded(
    tmp_path, models, examples_artifact
):
    spare.start()
    dead = spare.waiting_pid()
    os.killpg(dead, signal.SIGKILL)
    _wait_gone(dead)
    output, findings = _validate(tmp_path, models["sound"], examples_artifact)
    assert _verdict(output)[0] == 1  # served by a process of its own instead
    assert findings["server_pid"] != dead and _gone(findings["server_pid"])

    spare.start()
    unused = spare.waiting_pid()
    spare.discard()  # the run ended without infra validation
    assert spare.waiting_pid() is None and _gone(unused)


def _wait_gone(pid: int, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while Path(f"/proc/{pid}/status").exists() and "Z" not in _state(pid):
        assert time.monotonic() < deadline, f"process {pid} did not end"
        time.sleep(0.05)


def _state(pid: int) -> str:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return "gone"
    return next((line for line in status.splitlines() if line.startswith("State:")), "")


@pytest.mark.parametrize(
    ("flaw", "named"),
    [
        ("nan", "is not finite"),
        ("one_row", "malformed signature: serving_default output"),
    ],
)
def test_a_broken_serving_signature_is_not_blessed(
    tmp_path, models, examples_artifact, flaw, named
):
    output, findings = _validate(tmp_path, models[flaw], examples_artifact)
    blessed, reason = _verdict(output)
    assert blessed == 0 and named in reason, reason
    assert (Path(output.uri) / "INFRA_NOT_BLESSED").exists()
    assert _gone(findings["server_pid"])


def test_a_model_slower_than_its_budget_is_not_blessed(tmp_path, models, examples_artifact):
    output, findings = _validate(
        tmp_path, models["slow"], examples_artifact, budget_ms=50, requests=2
    )
    blessed, reason = _verdict(output)
    assert blessed == 0, reason
    assert reason.startswith("latency p99 ") and "ms over the budget 50 ms" in reason, reason
    assert findings["latency_ms"]["p99"] > 150  # the 200 ms sleep, as served
    assert _gone(findings["server_pid"])


def test_a_server_not_ready_in_time_is_stopped_and_quoted(tmp_path, models, examples_artifact):
    output, findings = _validate(tmp_path, models["sound"], examples_artifact, start_timeout=0.5)
    blessed, reason = _verdict(output)
    assert blessed == 0
    assert reason.startswith("the model server was not ready within 0.5 s: "), reason
    assert _gone(findings["server_pid"])  # stopped when the wait gave up, not left starting


def test_a_server_that_exits_at_start_is_quoted(tmp_path, models):
    # An empty model name: the server refuses its command line and exits before it is ready.
    base_path = tmp_path / "models" / "toy"
    infra.stage_version(str(models["sound"] / "Format-Serving"), str(base_path / "1"))
    runner = ConveyorRunner("", base_path, tmp_path)
    runner.start()
    try:
        with pytest.raises(infra.InfraValidationError) as raised:
            runner.wait_until_running(60)
    finally:
        runner.stop()
    reason = str(raised.value)
    assert reason.startswith("the model server exited with code 2 before it was ready: ")
    assert "--model-name" in reason  # the tail of its own output says why
    assert _gone(runner.pid)


def test_a_binary_that_exits_at_start_is_quoted(tmp_path, models):
    # A binary too old for the flags it is given says so and exits, as gflags does.
    program = tmp_path / "tensorflow_model_server"
    program.write_text(
        "#!/bin/sh\necho \"ERROR: unknown command line flag 'rest_api_port'\"\nexit 1\n"
    )
    program.chmod(0o755)
    base_path = tmp_path / "models" / "toy"
    infra.stage_version(str(models["sound"] / "Format-Serving"), str(base_path / "1"))
    runner = BinaryRunner(str(program), "toy", base_path, tmp_path)
    runner.start()
    try:
        with pytest.raises(infra.InfraValidationError) as raised:
            runner.wait_until_running(60)
    finally:
        runner.stop()
    assert str(raised.value) == (
        "the model server exited with code 1 before it was ready: "
        "ERROR: unknown command line flag 'rest_api_port'"
    )


def test_a_model_the_evaluator_did_not_bless_is_not_served(tmp_path, models, examples_artifact):
    output, findings = _validate(tmp_path, models["sound"], examples_artifact, evaluator_blessed=0)
    assert _verdict(output) == (0, "not evaluated as blessed")
    assert findings == {}  # nothing was started, so nothing was measured


# --- penguin, end to end ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def penguin(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("infra")
    paths, result = penguin_ci_run(workdir)
    return workdir, paths, result


def _infra_blessings(paths: RunPaths, run_id: str) -> list:
    store = metadata.open_store(paths.spec, paths.metadata_path)
    return run_artifacts(store, run_id, "InfraBlessing")


def test_a_sound_penguin_model_is_infra_blessed_and_pushed(penguin):
    _, paths, result = penguin
    assert result.outcome == "pushed", result.message
    [blessing] = _infra_blessings(paths, result.run_id)
    assert metadata.custom_property(blessing, "blessed") == 1
    assert metadata.custom_property(blessing, "conveyor_reason").startswith("served 120 canary")
    assert metadata.custom_property(blessing, "conveyor_infra_server") == "conveyor"
    report = (Path(result.run_dir) / REPORT_FILE).read_text()
    assert "infra validation server</td><td>Conveyor&#39;s model server" in report
    assert [n.state for n in result.nodes if n.node_id == "infra_validator"] == ["executed"]
    # The server ran in the spare the run started when its trainer executed (spare.py).
    run_log = (Path(result.run_dir) / RUN_LOG).read_text()
    assert "Infra validation: model server started in the spare pid" in run_log
    assert run_log.count("Infra validation: spare model server started") == 1  # one a run
    assert spare.waiting_pid() is None


def test_a_latency_budget_breach_blocks_the_push(penguin):
    workdir, paths, first = penguin
    served = model_digest(str(paths.serving_dir / "1"))
    loaded = load_spec(
        "penguin",
        env="ci",
        overrides=["push.latency_budget_ms=0.001", "runtime.alert_webhook_env=INFRA_WEBHOOK"],
        workdir=workdir,
    )
    with recording_webhook() as (url, alerts):
        os.environ["INFRA_WEBHOOK"] = url
        try:
            result = nightly.run(loaded, workdir, echo=lambda _: None)
        finally:
            del os.environ["INFRA_WEBHOOK"]

    assert result.outcome == "not_pushed", result.message
    # NOT_PUSHED, yet operators are told: a blessed model that cannot be served is theirs to fix.
    [alert] = alerts
    assert alert["outcome"] == "not_pushed" and alert["reason"] == result.message
    assert result.message.startswith(
        "nothing pushed: the infra validator did not bless the model: latency p99 "
    ), result.message
    assert "ms over the budget 0.001 ms" in result.message
    # Serving untouched: still version 1 alone, byte for byte.
    assert sorted(p.name for p in paths.serving_dir.iterdir()) == ["1"]
    assert model_digest(str(paths.serving_dir / "1")) == served
    # ML Metadata: the InfraBlessing and the push record say why.
    [blessing] = _infra_blessings(paths, result.run_id)
    assert metadata.custom_property(blessing, "blessed") == 0
    reason = metadata.custom_property(blessing, "conveyor_reason")
    assert reason.startswith("latency p99 ")
    record = metadata.find_run(metadata.open_store(paths.spec, paths.metadata_path), result.run_id)
    assert record.pushed_version is None and reason in record.push_reason
    # The run's summary and report carry it too.
    summary = json.loads((Path(result.run_dir) / RUN_SUMMARY).read_text())
    assert reason in summary["message"]
    report = (Path(result.run_dir) / REPORT_FILE).read_text()
    assert "infra validation" in report and "over the budget 0.001 ms" in report
    # The changed budget runs the infra validator again, and so the Pusher.
    executed = {n.node_id for n in result.nodes if n.state == "executed"}
    assert {"infra_validator", "pusher"} <= executed
    assert first.outcome == "pushed"
