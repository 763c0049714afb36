"""Server-side batching (`--enable-batching`, TF Serving's flag) on a real server process.

One `python -m pipelines.serving.model_server` serves TF Serving's `half_plus_two` with a batching
parameters file whose batch timeout is long (0.2 s) and which has one batch thread, so requests
sent together from several threads wait for each other and are merged. Every answer must equal
the same SavedModel called in this process on that request alone; the metrics must show a call
that merged several requests; a request bigger than `max_batch_size` and a failing merged call
are answered with TF Serving's errors; a parameters file TF Serving would refuse stops the
server with one line naming it.
"""

from __future__ import annotations

import subprocess
import sys
import threading

import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from pipelines.core.paths import FRAMEWORK_ROOT
from tests.half_plus_two import write_half_plus_two
from tests.serving_server import serving

MODEL = "half_plus_two"
MAX_BATCH = 16
PARAMETERS = f"""\
max_batch_size {{ value: {MAX_BATCH} }}
batch_timeout_micros {{ value: 200000 }}
num_batch_threads {{ value: 1 }}
max_enqueued_batches {{ value: 100 }}
allowed_batch_sizes: 4
allowed_batch_sizes: 8
allowed_batch_sizes: {MAX_BATCH}
"""
CLIENTS = 8


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    root = tmp_path_factory.mktemp("serving_batching")
    write_half_plus_two(root / MODEL / "1")
    (root / "batching.config").write_text(PARAMETERS)
    return root


@pytest.fixture(scope="module")
def server(model):
    args = ["--model-name", MODEL, "--model-base-path", str(model / MODEL), "--enable-batching"]
    args += ["--batching-parameters-file", str(model / "batching.config")]
    with serving(args, model / "server") as running:
        yield running


@pytest.fixture(scope="module")
def signatures(model):
    """The SavedModel's signatures called in this process, one request at a time."""
    import tensorflow as tf

    return tf.saved_model.load(str(model / MODEL / "1")).signatures


def _together(server, requests: list[tuple[str, dict]]) -> list[httpx.Response]:
    """POSTs each (path, body) from a thread of its own, all released at once."""
    start = threading.Barrier(len(requests))
    answers: list = [None] * len(requests)

    def send(index: int, path: str, body: dict) -> None:
        start.wait()
        answers[index] = httpx.post(server.url + path, json=body, timeout=60)

    threads = [
        threading.Thread(target=send, args=(i, path, body))
        for i, (path, body) in enumerate(requests)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


def _batch_calls(server) -> dict[str, float]:
    """`conveyor_serving_batch_requests` as {"count": calls, "sum": requests} for
    serving_default, and the calls that held a single request ("single")."""
    found = {}
    text = server.get("/monitoring/prometheus/metrics").text
    for family in text_string_to_metric_families(text):
        if family.name != "conveyor_serving_batch_requests":
            continue
        for sample in family.samples:
            if sample.labels.get("signature") != "serving_default":
                continue
            if sample.name.endswith("_count"):
                found["count"] = sample.value
            elif sample.name.endswith("_sum"):
                found["sum"] = sample.value
            elif sample.labels.get("le") == "1.0":
                found["single"] = sample.value
    return found


def test_concurrent_requests_are_merged_and_each_answered_as_alone(server, signatures):
    import tensorflow as tf

    before = _batch_calls(server)
    # Rows of different counts (1 to 3) and values per client: a mix-up would show.
    rows = [
        [[float(client) + 0.25 * row] for row in range(client % 3 + 1)] for client in range(CLIENTS)
    ]
    answers = _together(server, [(f"/v1/models/{MODEL}:predict", {"instances": r}) for r in rows])
    for sent, answer in zip(rows, answers, strict=True):
        assert answer.status_code == 200, answer.text
        alone = signatures["serving_default"](x=tf.constant(sent, tf.float32))["y"].numpy()
        np.testing.assert_array_equal(np.array(answer.json()["predictions"], np.float32), alone)
    after = _batch_calls(server)
    calls = after["count"] - before.get("count", 0)
    merged = calls - (after.get("single", 0) - before.get("single", 0))
    assert after["sum"] - before.get("sum", 0) == CLIENTS  # every request in exactly one call
    assert merged >= 1, f"no call merged several requests: {after} (before: {before})"


def test_signatures_are_batched_apart(server, signatures):
    """Predict and regress requests sent together: each goes to its own signature's batch."""
    import tensorflow as tf

    requests = []
    for client in range(CLIENTS):
        value = float(client)
        if client % 2:
            body = {"signature_name": "regress_x_to_y", "examples": [{"x": value}]}
            requests.append((f"/v1/models/{MODEL}:regress", body))
        else:
            requests.append((f"/v1/models/{MODEL}:predict", {"instances": [[value]]}))
    for (path, body), answer in zip(requests, _together(server, requests), strict=True):
        assert answer.status_code == 200, answer.text
        if path.endswith(":regress"):
            example = tf.train.Example()
            example.features.feature["x"].float_list.value.append(body["examples"][0]["x"])
            alone = signatures["regress_x_to_y"](inputs=tf.constant([example.SerializeToString()]))[
                "outputs"
            ].numpy()
            assert answer.json()["results"] == pytest.approx(alone.reshape(-1).tolist())
        else:
            alone = signatures["serving_default"](x=tf.constant(body["instances"], tf.float32))[
                "y"
            ].numpy()
            np.testing.assert_array_equal(np.array(answer.json()["predictions"], np.float32), alone)


def test_a_request_bigger_than_max_batch_size_is_refused_as_tf_serving_does(server):
    answer = server.post(f"/v1/models/{MODEL}:predict", {"instances": [[1.0]] * (MAX_BATCH + 1)})
    assert answer.status_code == 400
    assert answer.json() == {
        "error": f"Task size {MAX_BATCH + 1} is larger than maximum input batch size {MAX_BATCH}"
    }


def test_a_failing_merged_call_answers_each_of_its_requests_with_the_error(server):
    """A tf.Example without the required feature fails the regress call it is merged into."""
    bad = {"signature_name": "regress_x_to_y", "examples": [{"x2": 1.0}]}
    good = {"signature_name": "regress_x_to_y", "examples": [{"x": 1.0}]}
    path = f"/v1/models/{MODEL}:regress"
    answers = _together(server, [(path, bad)] + [(path, good)] * 3)
    failure = answers[0]
    assert failure.status_code == 400, failure.text
    assert "x" in failure.json()["error"]
    for answer in answers[1:]:
        # Merged with the bad one: the same error; in a batch of its own: the answer.
        if answer.status_code == 200:
            assert answer.json() == {"results": [2.5]}
        else:
            assert answer.json() == failure.json()
    # The server answers on after the failed call.
    assert server.post(path, good).json() == {"results": [2.5]}


@pytest.mark.parametrize(
    "text, problem",
    [
        (
            "max_batch_size { value: 8 }\nbatch_timeout_micros: 7\n",
            "not a valid BatchingParameters",
        ),
        (
            "max_batch_size { value: 8 }\nallowed_batch_sizes: 2\nallowed_batch_sizes: 4\n",
            "the last of allowed_batch_sizes must equal max_batch_size",
        ),
    ],
)
def test_a_bad_batching_parameters_file_stops_the_server_naming_it(tmp_path, text, problem):
    parameters = tmp_path / "batching.config"
    parameters.write_text(text)
    done = subprocess.run(
        [
            sys.executable,
            *("-m", "pipelines.serving.model_server", "--model-name", MODEL),
            *("--model-base-path", str(tmp_path / MODEL), "--port", "0"),
            *("--enable-batching", "--batching-parameters-file", str(parameters)),
        ],
        cwd=FRAMEWORK_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, done.stderr
    assert str(parameters) in lines[0] and problem in lines[0]
    assert "Traceback" not in done.stderr
