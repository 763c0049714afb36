"""Server-side batching, as TF Serving's `--enable_batching` does it: concurrent requests to
the same signature are merged into one call of the signature and its outputs split back.

TF Serving wraps each servable's session in a batching session (`batching_session.cc`) fed by a
shared batch scheduler (`shared_batch_scheduler.h`); this module follows both:

- Parameters: TF Serving's `BatchingParameters` text proto (`--batching_parameters_file`), with
  the scheduler's defaults for a field the file leaves out: `max_batch_size` 1000,
  `batch_timeout_micros` 0, `max_enqueued_batches` 10, `num_batch_threads` one per core.
- Queues: one per signature and input layout (each input's dtype and non-batch dimensions), so
  only requests whose tensors can be stacked are merged. A task joins the open batch of its
  queue when its rows fit under `max_batch_size`, else it closes that batch and opens a new one;
  with `max_enqueued_batches` batches already waiting, it is refused with TF Serving's
  UNAVAILABLE "The batch scheduling queue to which this task was submitted is full". A task of
  more rows than `max_batch_size` is refused with TF Serving's INVALID_ARGUMENT "Task size N is
  larger than maximum input batch size M" (TF Serving's behaviour without large batch
  splitting, which its BatchingParameters do not switch on).
- Scheduling: `num_batch_threads` threads each take the oldest batch that is closed, full, or
  whose first task has waited `batch_timeout_micros`, and run it. With a timeout of 0 a batch
  runs as soon as a thread is free, so requests merge only while every thread is busy: no
  request waits for company. Then a request that finds a thread free and nothing queued for
  its signature runs its call in its own thread, in that thread's place (the same schedule,
  without handing the call to a batch thread and back).
- Padding: with `allowed_batch_sizes`, a batch is padded up to the next allowed size with
  copies of its first row, as TF Serving pads, and the padding's outputs are dropped.
- Errors: when a merged call fails, every request in it is answered with that error.

What differs: a request whose inputs are scalars, or whose inputs disagree on their first
dimension, runs alone (TF Serving refuses it); requests whose non-batch dimensions differ are
never merged, so `pad_variable_length_inputs` is accepted and has nothing to pad.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipelines.serving.model_server.errors import ServingError, invalid_argument

# BasicBatchScheduler's defaults (basic_batch_scheduler.h), for fields a file leaves out.
DEFAULT_MAX_BATCH_SIZE = 1000
DEFAULT_BATCH_TIMEOUT_MICROS = 0
DEFAULT_MAX_ENQUEUED_BATCHES = 10


@dataclass(frozen=True)
class BatchingOptions:
    """The batching parameters in force (TF Serving's BatchingParameters, defaults filled)."""

    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE
    batch_timeout_micros: int = DEFAULT_BATCH_TIMEOUT_MICROS
    max_enqueued_batches: int = DEFAULT_MAX_ENQUEUED_BATCHES
    num_batch_threads: int = 0  # 0: one per core
    allowed_batch_sizes: tuple[int, ...] = ()
    pad_variable_length_inputs: bool = False

    @classmethod
    def from_message(cls, parameters: Any, source: str) -> BatchingOptions:
        """The options of a parsed BatchingParameters; `ServingConfigError` naming `source`
        when TF Serving would refuse them."""
        from pipelines.serving_state.config_files import ServingConfigError

        def value(field: str, default: int) -> int:
            return getattr(parameters, field).value if parameters.HasField(field) else default

        options = cls(
            max_batch_size=value("max_batch_size", DEFAULT_MAX_BATCH_SIZE),
            batch_timeout_micros=value("batch_timeout_micros", DEFAULT_BATCH_TIMEOUT_MICROS),
            max_enqueued_batches=value("max_enqueued_batches", DEFAULT_MAX_ENQUEUED_BATCHES),
            num_batch_threads=value("num_batch_threads", 0),
            allowed_batch_sizes=tuple(parameters.allowed_batch_sizes),
            pad_variable_length_inputs=parameters.pad_variable_length_inputs,
        )
        problems = []
        if options.batch_timeout_micros < 0:
            problems.append("batch_timeout_micros must not be negative")
        if options.max_enqueued_batches < 1:
            problems.append("max_enqueued_batches must be at least 1")
        sizes = options.allowed_batch_sizes
        if sizes and sizes[-1] != options.max_batch_size:
            problems.append(
                f"the last of allowed_batch_sizes ({sizes[-1]}) must equal max_batch_size "
                f"({options.max_batch_size}, the default when the file does not set it)"
            )
        if sizes and sizes[0] < 1:
            problems.append("allowed_batch_sizes must be positive")
        if problems:
            raise ServingConfigError(
                f"{source}: TF Serving would refuse these batching parameters: "
                f"{'; '.join(problems)}."
            )
        return options

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> BatchingOptions:
        """Reads a `--batching_parameters_file` (BatchingParameters in text proto format)
        with TF Serving's message; `ServingConfigError` names the file when it cannot."""
        from pipelines.serving_state.config_files import read_batching_config

        return cls.from_message(read_batching_config(path), str(path))

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> BatchingOptions:
        """The options as `dataclasses.asdict` wrote them (how a worker process gets them)."""
        return cls(**{**values, "allowed_batch_sizes": tuple(values["allowed_batch_sizes"])})

    @property
    def threads(self) -> int:
        """Batch threads: `num_batch_threads`, or one per core."""
        return self.num_batch_threads or os.cpu_count() or 1

    def padded_size(self, rows: int) -> int:
        """The batch size `rows` are padded to: the next allowed size, or `rows`."""
        for size in self.allowed_batch_sizes:
            if size >= rows:
                return size
        return rows


class _Task:
    """One request's call: its inputs, rows, and the future its outputs go to."""

    __slots__ = ("feeds", "rows", "future")

    def __init__(self, feeds: Mapping[str, np.ndarray], rows: int):
        self.feeds = feeds
        self.rows = rows
        self.future: Future = Future()


class _Batch:
    """Tasks merged into one call, and when its first task arrived."""

    __slots__ = ("tasks", "rows", "started")

    def __init__(self, started: float):
        self.tasks: list[_Task] = []
        self.rows = 0
        self.started = started


class _Queue:
    """The batches waiting for one signature and input layout; the last one is open."""

    __slots__ = ("signature", "batches")

    def __init__(self, signature: Any):
        self.signature = signature
        self.batches: deque[_Batch] = deque()


# What the scheduler calls to run a merged batch: the signature's own call, without batching.
BatchRunner = Callable[[Any, Mapping[str, np.ndarray]], dict[str, np.ndarray]]
# Told (signature, requests, rows after padding) after each merged call, for the metrics.
BatchObserver = Callable[[Any, int, int], None]


class BatchScheduler:
    """Merges concurrent calls of a signature into batches and runs them on its threads (one
    scheduler per server process, shared by every servable, as TF Serving shares its batch
    threads). `call` blocks until its request's outputs are ready."""

    def __init__(
        self,
        options: BatchingOptions,
        run_batch: BatchRunner,
        observe: BatchObserver | None = None,
    ):
        self.options = options
        self._run_batch = run_batch
        self._observe = observe
        self._timeout = options.batch_timeout_micros / 1e6
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._queues: dict[tuple, _Queue] = {}  # oldest first
        self._stopping = False
        # Batches running now, on the batch threads or inline (see `call`): at most `threads`.
        self._running = 0
        self._threads = [
            threading.Thread(target=self._serve, name=f"batch-{index}", daemon=True)
            for index in range(options.threads)
        ]
        for thread in self._threads:
            thread.start()

    def call(self, signature: Any, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Runs `signature` on `feeds` as part of a batch; its outputs (this request's rows)."""
        key = _layout(signature, feeds)
        if key is None:
            return self._run_batch(signature, feeds)  # not batchable: runs alone
        rows = next(iter(feeds.values())).shape[0]
        limit = self.options.max_batch_size
        if rows > limit:
            raise invalid_argument(
                f"Task size {rows} is larger than maximum input batch size {limit}"
            )
        task = _Task(feeds, rows)
        with self._lock:
            inline = (
                not self._timeout
                and self._running < self.options.threads
                and key not in self._queues
            )
            if inline:
                self._running += 1
        if inline:
            # No timeout, a free batch thread and nothing queued for this signature: the
            # batch would be this task alone, run at once. The calling thread runs it itself,
            # saving two thread hand-offs; it holds a batch thread's place meanwhile.
            batch = _Batch(0.0)
            batch.tasks.append(task)
            batch.rows = rows
            self._run_and_free_place(signature, batch)
            return task.future.result()
        with self._lock:
            queue = self._queues.get(key)
            if queue is None:
                queue = self._queues[key] = _Queue(signature)
            batches = queue.batches
            if not batches or batches[-1].rows + rows > limit:
                if len(batches) >= self.options.max_enqueued_batches:
                    raise ServingError(
                        "UNAVAILABLE",
                        "The batch scheduling queue to which this task was submitted is full; "
                        f"currently {len(batches)} batches enqueued and max_enqueued_batches "
                        f"is {self.options.max_enqueued_batches}",
                    )
                batches.append(_Batch(time.monotonic()))
            batch = batches[-1]
            batch.tasks.append(task)
            batch.rows += rows
            self._wake.notify()
        return task.future.result()

    def stop(self) -> None:
        """Lets the threads end once the batches queued now have run."""
        with self._lock:
            self._stopping = True
            self._wake.notify_all()

    # ------------------------------------------------------------------------------ threads

    def _serve(self) -> None:
        while True:
            with self._lock:
                taken = self._next_batch()
                while taken is None:
                    if self._stopping and not self._queues:
                        return
                    # With every place taken, wait for one to free (it notifies).
                    full = self._running >= self.options.threads
                    self._wake.wait(None if full else self._wait_seconds())
                    taken = self._next_batch()
            signature, batch = taken
            self._run_and_free_place(signature, batch)

    def _run_and_free_place(self, signature: Any, batch: _Batch) -> None:
        """Runs a batch whose batch-thread place is taken, then frees the place for the next."""
        try:
            self._run(signature, batch)
        finally:
            with self._lock:
                self._running -= 1
                self._wake.notify()

    def _next_batch(self) -> tuple[Any, _Batch] | None:
        """The oldest batch that may run now (closed, full, or timed out), taken off its queue;
        called with the lock held."""
        if self._running >= self.options.threads:
            return None
        now = time.monotonic()
        chosen_key, chosen = None, None
        for key, queue in self._queues.items():
            head = queue.batches[0]
            ready = (
                len(queue.batches) > 1
                or head.rows >= self.options.max_batch_size
                or now >= head.started + self._timeout
                or self._stopping
            )
            if ready and (chosen is None or head.started < chosen.batches[0].started):
                chosen_key, chosen = key, queue
        if chosen is None:
            return None
        batch = chosen.batches.popleft()
        if not chosen.batches:
            del self._queues[chosen_key]
        self._running += 1
        return chosen.signature, batch

    def _wait_seconds(self) -> float | None:
        """How long until the first open batch times out (None: nothing is waiting)."""
        if not self._queues:
            return None
        first = min(queue.batches[0].started for queue in self._queues.values())
        return max(0.0, first + self._timeout - time.monotonic())

    def _run(self, signature: Any, batch: _Batch) -> None:
        """One call for the whole batch, its outputs split back to each task."""
        tasks = batch.tasks
        size = self.options.padded_size(batch.rows)
        try:
            if len(tasks) == 1 and size == batch.rows:
                tasks[0].future.set_result(self._run_batch(signature, tasks[0].feeds))
                outputs = None
            else:
                outputs = self._run_batch(signature, _merge(tasks, size - batch.rows))
                pieces = _split(outputs, tasks, size)
        except BaseException as err:  # every request of the batch is answered with it
            for task in tasks:
                if not task.future.done():
                    task.future.set_exception(err)
            if not isinstance(err, Exception):
                raise
        else:
            if outputs is not None:
                for task, piece in zip(tasks, pieces, strict=True):
                    task.future.set_result(piece)
        if self._observe is not None:
            self._observe(signature, len(tasks), size)


def _layout(signature: Any, feeds: Mapping[str, np.ndarray]) -> tuple | None:
    """The queue key of a request: the signature and each input's name, dtype and non-batch
    dimensions; None when the request cannot be batched (a scalar input, or inputs that
    disagree on their first dimension)."""
    layout = []
    rows = None
    for name in sorted(feeds):
        array = feeds[name]
        shape = getattr(array, "shape", None)
        if not shape:
            return None
        if rows is None:
            rows = shape[0]
        elif shape[0] != rows:
            return None
        layout.append((name, array.dtype.str, shape[1:]))
    if rows is None:
        return None
    return (id(signature), *layout)


def _merge(tasks: list[_Task], padding: int) -> dict[str, np.ndarray]:
    """The tasks' inputs stacked along the batch dimension, plus `padding` copies of the first
    row (TF Serving pads with the first row too)."""
    merged = {}
    for name in tasks[0].feeds:
        parts = [task.feeds[name] for task in tasks]
        if padding:
            parts.append(np.repeat(parts[0][:1], padding, axis=0))
        merged[name] = np.concatenate(parts)
    return merged


def _split(
    outputs: Mapping[str, np.ndarray], tasks: list[_Task], size: int
) -> list[dict[str, np.ndarray]]:
    """Each task's rows of the batch's outputs, with batching_session.cc's errors for an output
    that has no batch dimension or another batch size."""
    for array in outputs.values():
        if array.ndim == 0:
            raise invalid_argument("Batched output tensor has 0 dimensions")
        if array.shape[0] != size:
            raise invalid_argument(
                "Batched output tensor's 0th dimension does not equal the sum of the 0th "
                "dimension sizes of the input tensors"
            )
    pieces = []
    start = 0
    for task in tasks:
        end = start + task.rows
        pieces.append({name: array[start:end] for name, array in outputs.items()})
        start = end
    return pieces
