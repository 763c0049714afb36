"""Errors as TF Serving reports them: a TensorFlow status code, its HTTP status, and the message
that goes into the REST answer's `{"error": ...}` body."""

from __future__ import annotations

# TF Serving's ToHTTPStatusCode (tensorflow_serving/model_servers/http_server.cc).
HTTP_STATUS = {
    "OK": 200,
    "CANCELLED": 499,
    "UNKNOWN": 500,
    "INVALID_ARGUMENT": 400,
    "DEADLINE_EXCEEDED": 504,
    "NOT_FOUND": 404,
    "ALREADY_EXISTS": 409,
    "PERMISSION_DENIED": 403,
    "RESOURCE_EXHAUSTED": 429,
    "FAILED_PRECONDITION": 400,
    "ABORTED": 409,
    "OUT_OF_RANGE": 400,
    "UNIMPLEMENTED": 501,
    "INTERNAL": 500,
    "UNAVAILABLE": 503,
    "DATA_LOSS": 500,
    "UNAUTHENTICATED": 401,
}

# tensorflow/core/protobuf/error_codes.proto, by number (what tf.errors.OpError.error_code is).
CODE_NAMES = {
    0: "OK",
    1: "CANCELLED",
    2: "UNKNOWN",
    3: "INVALID_ARGUMENT",
    4: "DEADLINE_EXCEEDED",
    5: "NOT_FOUND",
    6: "ALREADY_EXISTS",
    7: "PERMISSION_DENIED",
    8: "RESOURCE_EXHAUSTED",
    9: "FAILED_PRECONDITION",
    10: "ABORTED",
    11: "OUT_OF_RANGE",
    12: "UNIMPLEMENTED",
    13: "INTERNAL",
    14: "UNAVAILABLE",
    15: "DATA_LOSS",
    16: "UNAUTHENTICATED",
}


class ServingError(Exception):
    """A request the server answers with an error: `code` is TensorFlow's status code name
    (INVALID_ARGUMENT, NOT_FOUND...), `message` what TF Serving would say."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def http_status(self) -> int:
        """The HTTP status TF Serving answers this code with."""
        return HTTP_STATUS.get(self.code, 500)

    def status_string(self) -> str:
        """TensorFlow's `Status::ToString()`: `CODE: message`, as TF Serving nests it."""
        return f"{self.code}: {self.message}"


def invalid_argument(message: str) -> ServingError:
    """An INVALID_ARGUMENT error (HTTP 400)."""
    return ServingError("INVALID_ARGUMENT", message)


def not_found(message: str) -> ServingError:
    """A NOT_FOUND error (HTTP 404)."""
    return ServingError("NOT_FOUND", message)


def from_tensorflow(error: Exception) -> ServingError:
    """A TensorFlow exception raised while running a signature, as TF Serving reports it:
    an `OpError` keeps its own code; a Python-side refusal (a shape or dtype the function does
    not accept) is INVALID_ARGUMENT."""
    code = getattr(error, "error_code", None)
    message = getattr(error, "message", None) or str(error)
    if isinstance(code, int):
        return ServingError(CODE_NAMES.get(code, "UNKNOWN"), message)
    return invalid_argument(message)
