"""The HTTP side: an ASGI application that answers TF Serving's REST API and serves the
Prometheus metrics.

Paths are matched with TF Serving's own regular expressions
(`tensorflow_serving/model_servers/http_rest_api_util.cc`), so the same URLs work and the same
ones are refused ("Malformed request").

A request with a small body (under `INLINE_BODY_BYTES`: thousands of rows) is answered on the
event loop's thread: for it, handing the work to a thread and back costs two thread wake-ups,
more than its parsing and its signature call together, and TensorFlow releases the GIL while
it computes, so the loop's thread is the fastest place to run it. A larger body is parsed and
run in a worker thread, so one big batch does not hold up the requests behind it. With
server-side batching on (`batching.py`) every POST runs in a worker thread, where it waits for
its batch while the loop reads the next requests, which may join that batch. After a request
answered on the loop's thread, the loop busy-polls for the next one a short while
(`busy_poll.py`) rather than let its core go idle.

The application is a bare ASGI callable rather than a web framework's router: it has two
routes, and per request a framework's routing, request objects and dependency handling cost
more than the whole HTTP exchange (`make bench-serving` measures what is left).
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import unquote

from pipelines.serving.model_server import json_tensor
from pipelines.serving.model_server.busy_poll import BusyPoll
from pipelines.serving.model_server.errors import ServingError, invalid_argument
from pipelines.serving.model_server.metrics import ServerMetrics
from pipelines.serving.model_server.repository import ModelRepository

DEFAULT_MONITORING_PATH = "/monitoring/prometheus/metrics"
JSON = "application/json"
JSON_TYPE = JSON.encode()

PREDICTION_PATH = re.compile(
    r"/v1/models/([^/:]+)(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?:(classify|regress|predict)",
    re.IGNORECASE,
)
STATUS_PATH = re.compile(
    r"/v1/models(?:/([^/:]+))?(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?(?:/(metadata))?",
    re.IGNORECASE,
)
INT64_MAX = (1 << 63) - 1


class RestHandler:
    """Answers one REST request (method, raw path, body) with (HTTP status, JSON body),
    recording it in the metrics."""

    def __init__(self, repository: ModelRepository, metrics: ServerMetrics, request_log=None):
        self._repository = repository
        self._metrics = metrics
        self._request_log = request_log  # request_log.RequestLog, or None: nothing logged
        # (method, raw path) -> what `_route` made of it: paths repeat, matching them costs.
        self._routes: dict[tuple[str, str], tuple | str] = {}

    def handle(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        """Dispatches as TF Serving's HttpRestApiHandler::ProcessRequest does."""
        started = time.perf_counter()
        seen = {"model": "", "version": "", "signature": "", "method": "unknown"}
        try:
            answer = self._dispatch(method, path, body, seen)
            status, payload = 200, json_tensor.dumps(answer)
        except ServingError as err:
            status, payload = err.http_status, json_tensor.error_body(err)
        except RecursionError:
            # A body nested deeper than the conversion goes (past the parsers, json_tensor
            # refuses it itself): TF Serving's 400 and error body, not a 500 from the server.
            error = invalid_argument(json_tensor.NESTED_TOO_DEEPLY)
            status, payload = error.http_status, json_tensor.error_body(error)
        model = seen["model"]
        if model not in self._repository.snapshot.models:
            model = ""  # a name the server does not serve: not a label value of its own
        self._metrics.observe_request(
            model,
            seen["version"],
            seen["signature"],
            seen["method"],
            status,
            time.perf_counter() - started,
        )
        return status, payload

    def _dispatch(self, method: str, path: str, body: bytes, seen: dict) -> dict:
        route = self._routes.get((method, path))
        if route is None:
            route = _route(method, path)
            if len(self._routes) >= ROUTE_CACHE_SIZE:
                self._routes.clear()  # clients sending ever new paths: start over
            self._routes[(method, path)] = route
        if isinstance(route, str):
            raise invalid_argument(route)
        name, number, label, verb, problem = route
        seen["method"] = verb
        if problem:
            raise invalid_argument(problem)
        seen["model"] = name
        if verb in ("status", "metadata") and not name:
            raise invalid_argument("Missing model name in request.")
        if verb == "status":
            return self._repository.status(name, number, label)
        if verb == "metadata":
            servable = self._repository.resolve(name, number, label)
            seen["version"] = str(servable.version)
            return servable.metadata()
        # The body is parsed before the model is looked up, as TF Serving does.
        doc = json_tensor.parse_body(body)
        signature = json_tensor.signature_name(doc)
        seen["signature"] = signature or "serving_default"
        servable = self._repository.resolve(name, number, label)
        seen["version"] = str(servable.version)
        if verb == "predict":
            answer = servable.predict(doc)
        elif verb == "classify":
            answer = servable.classify(doc)
        else:
            answer = servable.regress(doc)
        logged = self._request_log
        if logged is not None and logged.sampled():
            logged.record(name, servable.version, seen["signature"], verb, doc, servable)
        return answer


def _route(method: str, path: str) -> tuple | str:
    """(model name, version, label, verb, problem) of a request's method and raw path, matched
    and decoded as TF Serving does (`problem`: the message for a version too large, else
    None); for a path that does not match, the "Malformed request" message."""
    if method == "POST":
        match = PREDICTION_PATH.fullmatch(path)
        if match:
            name, version, label, verb = match.groups()
            verb = verb.lower()
    elif method == "GET":
        match = STATUS_PATH.fullmatch(path)
        if match:
            name, version, label, subresource = match.groups()
            verb = "metadata" if subresource else "status"
    else:
        match = None
    if not match:
        return f"Malformed request: {method} {path}"
    number, problem = None, None
    if version:
        number = int(version)
        if number > INT64_MAX:
            problem = f"Failed to convert version: {version} to numeric."
    return unquote(name) if name else "", number, unquote(label) if label else None, verb, problem


# At most this many routes are remembered (RestHandler._routes).
ROUTE_CACHE_SIZE = 1024
# Bodies from this size on are handled in a worker thread (see the module's docstring).
INLINE_BODY_BYTES = 256 * 1024
# With batching, requests waiting for their batch each hold a worker thread: room for many.
BATCHING_WORKER_THREADS = 256
NOT_FOUND = b'{"detail":"Not Found"}'
METHOD_NOT_ALLOWED = b'{"detail":"Method Not Allowed"}'
REST_PREFIX = "/v1/"


def build_app(
    repository: ModelRepository,
    metrics: ServerMetrics,
    monitoring_path: str = DEFAULT_MONITORING_PATH,
    batching: bool = False,
    request_log=None,
    busy_poll_us: int = 0,
):
    """The ASGI application: `/v1/...` as TF Serving's REST API (any method: TF Serving
    answers those it does not serve with "Malformed request"), and GET `monitoring_path` with
    the metrics in Prometheus' text format; any other path is 404. `batching`: the servables'
    calls go through a batch scheduler, so every POST is handled in a worker thread.
    `request_log`: a `request_log.RequestLog` that logs a sampled share of the answered
    requests, closed at shutdown. `busy_poll_us`: after answering a request on the loop's
    thread, keep polling for the next one this long (`busy_poll.py`); 0, or batching, never."""
    handler = RestHandler(repository, metrics, request_log)
    busy = BusyPoll(busy_poll_us) if busy_poll_us > 0 and not batching else None
    # Threads for the work of large requests, or of every POST with batching (see the
    # module's docstring).
    threads = BATCHING_WORKER_THREADS if batching else min(32, (os.cpu_count() or 1) + 4)
    workers = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="rest")
    inline_limit = 0 if batching else INLINE_BODY_BYTES

    async def app(scope, receive, send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await _lifespan(receive, send, workers, request_log, busy)
            return
        if kind != "http":
            return
        path = scope["path"]
        method = scope["method"]
        if path == monitoring_path:
            if method not in ("GET", "HEAD"):
                await _respond(send, 405, METHOD_NOT_ALLOWED, JSON_TYPE)
                return
            from prometheus_client import CONTENT_TYPE_LATEST

            await _respond(send, 200, metrics.exposition(), CONTENT_TYPE_LATEST.encode())
        elif path.startswith(REST_PREFIX):
            body = await _read_body(receive)
            # The path as sent: TF Serving matches before it percent-decodes names and labels.
            raw = scope.get("raw_path") or path.encode()
            inline = len(body) < inline_limit or method != "POST"
            if inline:
                status, payload = handler.handle(method, raw.decode("latin-1"), body)
            else:
                status, payload = await asyncio.get_running_loop().run_in_executor(
                    workers, handler.handle, method, raw.decode("latin-1"), body
                )
            await _respond(send, status, payload, JSON_TYPE)
            if inline and busy is not None:
                busy.answered()
        else:
            await _respond(send, 404, NOT_FOUND, JSON_TYPE)

    return app


async def _read_body(receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":  # http.disconnect: the client went away
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def _respond(send, status: int, payload: bytes, content_type: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(payload)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


async def _lifespan(
    receive, send, workers: ThreadPoolExecutor, request_log=None, busy: BusyPoll | None = None
) -> None:
    """ASGI's lifespan protocol: nothing to start; the worker threads end at shutdown, the
    request log's files are closed and busy polling stops."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            workers.shutdown(wait=False)
            if request_log is not None:
                request_log.close()
            if busy is not None:
                busy.stop()
            await send({"type": "lifespan.shutdown.complete"})
            return
