"""The HTTP side: a FastAPI application that answers TF Serving's REST API and serves the
Prometheus metrics.

Paths are matched with TF Serving's own regular expressions
(`tensorflow_serving/model_servers/http_rest_api_util.cc`), so the same URLs work and the same
ones are refused ("Malformed request"). The work of a request (parsing, the signature call,
writing the answer) runs in a worker thread, so the event loop keeps accepting requests while
TensorFlow computes.
"""

from __future__ import annotations

import re
import time
from urllib.parse import unquote

from fastapi import FastAPI, Request, Response
from starlette.concurrency import run_in_threadpool

from pipelines.serving.runtime import json_tensor
from pipelines.serving.runtime.errors import ServingError, invalid_argument
from pipelines.serving.runtime.metrics import ServerMetrics
from pipelines.serving.runtime.repository import ModelRepository

DEFAULT_MONITORING_PATH = "/monitoring/prometheus/metrics"
JSON = "application/json"

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

    def __init__(self, repository: ModelRepository, metrics: ServerMetrics):
        self._repository = repository
        self._metrics = metrics

    def handle(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        """Dispatches as TF Serving's HttpRestApiHandler::ProcessRequest does."""
        started = time.perf_counter()
        seen = {"model": "", "version": "", "signature": "", "method": "unknown"}
        try:
            answer = self._dispatch(method, path, body, seen)
            status, payload = 200, json_tensor.dumps(answer)
        except ServingError as err:
            status, payload = err.http_status, json_tensor.error_body(err)
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
        malformed = invalid_argument(f"Malformed request: {method} {path}")
        if method == "POST":
            match = PREDICTION_PATH.fullmatch(path)
            if not match:
                raise malformed
            name, version, label, verb = match.groups()
            verb = verb.lower()
        elif method == "GET":
            match = STATUS_PATH.fullmatch(path)
            if not match:
                raise malformed
            name, version, label, subresource = match.groups()
            verb = "metadata" if subresource else "status"
        else:
            raise malformed
        seen["method"] = verb
        name = unquote(name) if name else ""
        label = unquote(label) if label else None
        number = None
        if version:
            number = int(version)
            if number > INT64_MAX:
                raise invalid_argument(f"Failed to convert version: {version} to numeric.")
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
            return servable.predict(doc)
        if verb == "classify":
            return servable.classify(doc)
        return servable.regress(doc)


def build_app(
    repository: ModelRepository,
    metrics: ServerMetrics,
    monitoring_path: str = DEFAULT_MONITORING_PATH,
) -> FastAPI:
    """The application: `/v1/...` as TF Serving's REST API, and `monitoring_path` with the
    metrics in Prometheus' text format."""
    handler = RestHandler(repository, metrics)
    app = FastAPI(
        title="Conveyor model server",
        description="TF Serving's REST API over SavedModels",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )

    @app.get(monitoring_path, include_in_schema=False)
    def prometheus_metrics() -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST

        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    async def rest(request: Request) -> Response:
        body = await request.body()
        # The path as sent: TF Serving matches before it percent-decodes names and labels.
        raw = request.scope.get("raw_path") or request.url.path.encode()
        status, payload = await run_in_threadpool(
            handler.handle, request.method, raw.decode("latin-1"), body
        )
        return Response(payload, status_code=status, media_type=JSON)

    app.add_api_route("/v1/{rest:path}", rest, methods=["GET", "POST"], include_in_schema=False)
    return app
