"""The model server's Prometheus metrics, in a registry of the server's own (never the global
one), served as Prometheus' text format on the monitoring path.

Names follow Prometheus' conventions (base units, `_total` counters). Labels stay few and
bounded: `model` is a configured model's name ("" for a name the server does not serve, so a
client cannot grow the label set), `version` the version that answered ("" before one was
resolved), `signature`, `method` (predict, classify, regress, status, metadata) and `status`
(the HTTP status code answered).

A server with several worker processes (`--workers`) runs prometheus_client's multiprocess
mode: each worker writes its values to files in a folder of the server's, and the monitoring
path, whichever worker answers it, reads them all: counters and histograms summed over the
workers, `conveyor_serving_loaded_versions` the smallest count among the live workers (a version
counts once every worker serves it).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

REQUEST_LABELS = ("model", "version", "signature", "method", "status")
LATENCY_LABELS = ("model", "version", "signature", "method")
# Seconds: from a fast single-row call on a small model to a slow batch under load.
LATENCY_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
LOAD_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
# Rows or requests in one batched call (--enable-batching).
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class ServerMetrics:
    """The server's metrics, registered in `registry` (a new one by default):

    - `conveyor_serving_requests_total{model,version,signature,method,status}`: requests
      answered;
    - `conveyor_serving_request_errors_total{...same}`: those answered with an error;
    - `conveyor_serving_request_latency_seconds{model,version,signature,method}`: time from the
      request's body being read to its answer being ready (histogram);
    - `conveyor_serving_loaded_versions{model}`: versions loaded and available;
    - `conveyor_serving_model_load_seconds{model}`: time to load and warm a version (histogram);
    - `conveyor_serving_model_load_failures_total{model}`: versions that failed to load;
    - with batching on (`--enable-batching`), per signature call made by the batch scheduler:
      `conveyor_serving_batch_size{model,signature}`, rows after padding (TF Serving's
      `:tensorflow:serving:batching_session:processed_batch_size`), and
      `conveyor_serving_batch_requests{model,signature}`, requests merged into it;
    - with a request log (`push.request_log`),
      `conveyor_serving_request_log_records_total{model,status}`: requests logged (`ok`) or
      whose record could not be written (`failed`), as TF Serving's
      `:tensorflow:serving:request_log_count`.
    """

    def __init__(
        self, registry: CollectorRegistry | None = None, multiprocess_dir: str | None = None
    ):
        """`multiprocess_dir`: the folder of a multi-worker server's metric files (the process
        must have been started with PROMETHEUS_MULTIPROC_DIR naming it); the exposition then
        gathers every worker's values from there."""
        self.registry = registry or CollectorRegistry()
        self._gathered: CollectorRegistry | None = None
        if multiprocess_dir:
            self._gathered = CollectorRegistry()
            MultiProcessCollector(self._gathered, path=multiprocess_dir)
        self.requests = Counter(
            "conveyor_serving_requests",
            "REST requests answered, by model, version, signature, method and HTTP status.",
            REQUEST_LABELS,
            registry=self.registry,
        )
        self.errors = Counter(
            "conveyor_serving_request_errors",
            "REST requests answered with an error, by model, version, signature, method and "
            "HTTP status.",
            REQUEST_LABELS,
            registry=self.registry,
        )
        self.latency = Histogram(
            "conveyor_serving_request_latency_seconds",
            "Time to answer a REST request, from its body read to its answer ready.",
            LATENCY_LABELS,
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.loaded_versions = Gauge(
            "conveyor_serving_loaded_versions",
            "Versions loaded, warmed and available, by model.",
            ("model",),
            registry=self.registry,
            multiprocess_mode="livemin",
        )
        self.load_seconds = Histogram(
            "conveyor_serving_model_load_seconds",
            "Time to load and warm up a model version.",
            ("model",),
            buckets=LOAD_BUCKETS,
            registry=self.registry,
        )
        self.load_failures = Counter(
            "conveyor_serving_model_load_failures",
            "Model versions that failed to load or warm up.",
            ("model",),
            registry=self.registry,
        )
        self.batch_size = Histogram(
            "conveyor_serving_batch_size",
            "Rows in one batched signature call, padding included (--enable-batching).",
            ("model", "signature"),
            buckets=BATCH_BUCKETS,
            registry=self.registry,
        )
        self.batch_requests = Histogram(
            "conveyor_serving_batch_requests",
            "Requests merged into one batched signature call (--enable-batching).",
            ("model", "signature"),
            buckets=BATCH_BUCKETS,
            registry=self.registry,
        )
        self.logged = Counter(
            "conveyor_serving_request_log_records",
            "Requests written to the request log (status ok), or not written (failed).",
            ("model", "status"),
            registry=self.registry,
        )
        self._request_children: dict[tuple, tuple] = {}

    def observe_request(
        self,
        model: str,
        version: str,
        signature: str,
        method: str,
        status: int,
        seconds: float,
    ) -> None:
        """Records one answered request."""
        key = (model, version, signature, method, status)
        children = self._request_children.get(key)
        if children is None:
            # A label set's children looked up once: `labels()` checks and hashes its
            # arguments on every call. The set is bounded (see the module's docstring).
            labels = (model, version, signature, method, str(status))
            children = (
                self.requests.labels(*labels),
                self.errors.labels(*labels) if status >= 400 else None,
                self.latency.labels(model, version, signature, method),
            )
            self._request_children[key] = children
        requests, errors, latency = children
        requests.inc()
        if errors is not None:
            errors.inc()
        latency.observe(seconds)

    def observe_logged(self, model: str, ok: bool) -> None:
        """Records one request the request log wrote (or failed to write)."""
        self.logged.labels(model, "ok" if ok else "failed").inc()

    def observe_batch(self, model: str, signature: str, requests: int, rows: int) -> None:
        """Records one batched call: `requests` merged, `rows` after padding."""
        self.batch_size.labels(model, signature).observe(rows)
        self.batch_requests.labels(model, signature).observe(requests)

    def exposition(self) -> bytes:
        """The registry (every worker's values, in multiprocess mode) in Prometheus' text
        format."""
        return generate_latest(self._gathered or self.registry)
