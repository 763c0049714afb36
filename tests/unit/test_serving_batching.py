"""The batching parameters file (TF Serving's BatchingParameters proto) and the batch
scheduler's merging and splitting, on numpy arrays with a real function for the signature's
call; the server with batching on is tested in tests/e2e/test_serving_batching.py."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from pipelines.serving.model_server.batching import BatchingOptions, BatchScheduler
from pipelines.serving.model_server.errors import ServingError
from pipelines.serving_state.config_files import ServingConfigError


def test_a_file_leaving_fields_out_gets_tf_servings_scheduler_defaults(tmp_path):
    path = tmp_path / "batching.config"
    path.write_text(
        "max_batch_size { value: 32 }\nallowed_batch_sizes: 8\nallowed_batch_sizes: 32\n"
    )
    options = BatchingOptions.from_file(path)
    assert options.max_batch_size == 32
    assert options.batch_timeout_micros == 0
    assert options.max_enqueued_batches == 10
    assert options.threads >= 1
    assert [options.padded_size(n) for n in (1, 8, 9, 32)] == [8, 8, 32, 32]
    assert (
        BatchingOptions.from_dict({**options.__dict__, "allowed_batch_sizes": [8, 32]}) == options
    )


def test_allowed_sizes_must_end_at_the_default_max_batch_size(tmp_path):
    path = tmp_path / "batching.config"
    path.write_text("allowed_batch_sizes: 8\n")
    with pytest.raises(ServingConfigError) as raised:
        BatchingOptions.from_file(path)
    assert str(path) in str(raised.value) and "max_batch_size (1000" in str(raised.value)


def _double(signature, feeds):
    """The 'signature': twice its input, and the rows it was called with."""
    x = feeds["x"]
    return {"y": x * 2, "rows": np.full(x.shape[0], x.shape[0])}


def test_concurrent_calls_are_merged_padded_and_split_back():
    options = BatchingOptions(
        max_batch_size=8, batch_timeout_micros=300_000, num_batch_threads=1,
        allowed_batch_sizes=(4, 8),
    )  # fmt: skip
    seen = []
    scheduler = BatchScheduler(options, _double, lambda sig, n, rows: seen.append((n, rows)))
    answers = {}
    start = threading.Barrier(3)

    def send(index: int) -> None:
        feeds = {"x": np.arange(index + 1, dtype=np.float32).reshape(-1, 1) + 10 * index}
        start.wait()
        answers[index] = (feeds["x"], scheduler.call("sig", feeds))

    _run_together([threading.Thread(target=send, args=(i,)) for i in range(3)])
    scheduler.stop()
    for sent, outputs in answers.values():
        np.testing.assert_array_equal(outputs["y"], sent * 2)
    assert seen == [(3, 8)]  # 1 + 2 + 3 rows in one call, padded to 8
    assert {int(outputs["rows"][0]) for _, outputs in answers.values()} == {8}


def test_too_large_a_task_and_a_failing_batch_answer_with_errors():
    def fail(signature, feeds):
        raise ServingError("INVALID_ARGUMENT", "bad input")

    scheduler = BatchScheduler(BatchingOptions(max_batch_size=2, num_batch_threads=1), fail)
    with pytest.raises(ServingError, match="Task size 3 is larger than maximum input batch size 2"):
        scheduler.call("sig", {"x": np.zeros((3, 1))})
    with pytest.raises(ServingError, match="bad input"):
        scheduler.call("sig", {"x": np.zeros((1, 1))})
    scheduler.stop()


def test_without_a_timeout_many_callers_each_get_their_own_rows():
    """Calls run inline while a batch thread is free and queue (and merge) once none is."""
    scheduler = BatchScheduler(BatchingOptions(max_batch_size=64, num_batch_threads=2), _double)
    wrong = []

    def caller(index: int) -> None:
        for step in range(50):
            x = np.full((index % 3 + 1, 2), index * 1000 + step, np.float32)
            if not np.array_equal(scheduler.call("sig", {"x": x})["y"], x * 2):
                wrong.append((index, step))

    _run_together([threading.Thread(target=caller, args=(i,)) for i in range(12)])
    scheduler.stop()
    assert wrong == []


def _run_together(threads: list[threading.Thread]) -> None:
    """Starts every thread, then waits for all of them."""
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
