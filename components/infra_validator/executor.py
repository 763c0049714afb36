"""The infra validator's executor: the candidate served by a fresh model server, checked with
canary requests from the evaluation split.

In order, the first failure deciding the verdict (its reason recorded on the InfraBlessing):
1. a model the Evaluator did not bless is not served at all ("not evaluated as blessed");
2. the candidate's serving SavedModel (`Format-Serving`, found as TFX's Pusher finds it) is
   staged as version 1 under a temporary base path (beside the InfraBlessing, under the
   pipeline root, for a server that runs elsewhere), and the model server the spec's
   `push.infra_server` names is started on it through its runner (runners/): Conveyor's own
   (the default; in a local run, in the spare process started when the run's trainer started:
   spare.py), a `tensorflow_model_server` binary, or TF Serving's image as a Kubernetes Job.
   It must be running with the model loaded within `start_timeout_seconds` (a server that
   exits or hangs fails, with the tail of its output);
3. `GET /v1/models/M` must report version 1 AVAILABLE;
4. `canary_requests` rows of the evaluation split are each sent in every request format the
   model has: `serving_default` by row (`instances`) and by column (`inputs`), and serialized
   tf.Examples to `serving_examples` when the model has it (Conveyor's trainer exports both);
   every answer must be HTTP 200, shaped as the signature's outputs, finite, and equal to what
   the same SavedModel answers in this process (relative tolerance 1e-5);
5. the p99 latency over all those requests must stay within `latency_budget_ms`.
The server is stopped afterwards whatever happened, and a local one dies with this process if
that is killed first. `infra_validation.json` in the blessing records the figures and the
server, which the InfraBlessing also names (`conveyor_infra_server`). A server that cannot run
here at all (no binary, no cluster) fails the execution: that is the set-up's fault, not the
candidate's.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from absl import logging
from tfx.dsl.components.base import base_executor
from tfx.types import artifact_utils
from tfx.utils import io_utils, path_utils

from components.infra_validator import blessing as infra_blessing
from components.infra_validator import runners
from components.infra_validator.runners.base import (
    InfraValidationError,
    ModelServerRunner,
    ServerChoice,
)
from pipelines.core import storage

MODEL_NAME_KEY = "model_name"
LATENCY_BUDGET_KEY = "latency_budget_ms"
CANARY_REQUESTS_KEY = "canary_requests"
START_TIMEOUT_KEY = "start_timeout_seconds"
SERVER_KEY = "infra_server"  # a ServerChoice as JSON

RESULT_FILE = "infra_validation.json"
# Where a server that runs elsewhere reads the candidate: inside the InfraBlessing's folder
# (under the pipeline root), removed once the validation ends.
SHARED_STAGING_DIR = ".candidate"
EVAL_SPLIT = "eval"
DEFAULT_SIGNATURE = "serving_default"
EXAMPLES_SIGNATURE = "serving_examples"  # serialized tf.Examples in, as the trainer exports it
RELATIVE_TOLERANCE = 1e-5
# Probabilities near zero differ by rounding alone at any relative tolerance; below this
# absolute difference two answers are the same.
ABSOLUTE_TOLERANCE = 1e-6
REQUEST_TIMEOUT_SECONDS = 30.0


@dataclass(frozen=True)
class Settings:
    """What the validation needs beyond the model and the examples (the component's parameters)."""

    model_name: str
    latency_budget_ms: float
    canary_requests: int
    start_timeout_seconds: float = 120.0
    server: ServerChoice = field(default_factory=ServerChoice)


@dataclass
class Findings:
    """What one validation measured, for `infra_validation.json`."""

    requests: int = 0
    formats: list[str] = field(default_factory=list)
    server: str | None = None  # the runner's kind
    server_description: str | None = None
    server_pid: int | None = None
    start_seconds: float | None = None
    latency_ms: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """The findings as JSON-ready values."""
        return {
            "requests": self.requests,
            "formats": self.formats,
            "server": self.server,
            "server_description": self.server_description,
            "server_pid": self.server_pid,
            "start_seconds": self.start_seconds,
            "latency_ms": self.latency_ms,
            "seconds": round(self.seconds, 3),
        }


class Executor(base_executor.BaseExecutor):
    """Serves the candidate in a fresh model server and marks the InfraBlessing with the
    verdict."""

    def Do(self, input_dict, output_dict, exec_properties):  # noqa: N802 - TFX's name
        """Validates the model and marks the `blessing` output (blessed 1/0, the reason and the
        server that checked it).

        A failed check is a verdict (not blessed), never a failed execution, so the Pusher runs
        and records why nothing was pushed. A server that cannot run here fails the execution.
        """
        self._log_startup(input_dict, output_dict, exec_properties)
        output = artifact_utils.get_single_instance(output_dict["blessing"])
        model_blessings = input_dict.get("model_blessing") or []
        if any(b.get_int_custom_property(infra_blessing.BLESSED_KEY) != 1 for b in model_blessings):
            infra_blessing.mark_not_evaluated(output)
            return
        model = artifact_utils.get_single_instance(input_dict["model"])
        model_path = path_utils.serving_model_path(
            model.uri, path_utils.is_old_model_artifact(model)
        )
        examples = artifact_utils.get_single_instance(input_dict["examples"])
        settings = Settings(
            model_name=exec_properties[MODEL_NAME_KEY],
            latency_budget_ms=float(exec_properties[LATENCY_BUDGET_KEY]),
            canary_requests=int(exec_properties[CANARY_REQUESTS_KEY]),
            start_timeout_seconds=float(exec_properties[START_TIMEOUT_KEY]),
            server=ServerChoice.from_json(exec_properties.get(SERVER_KEY)),
        )
        findings = Findings()
        shared_staging = storage.join(output.uri, SHARED_STAGING_DIR)
        try:
            validate(model_path, eval_split_files(examples), settings, findings, shared_staging)
        except InfraValidationError as err:
            blessed, reason = False, str(err)
        else:
            blessed = True
            reason = (
                f"served {findings.requests} canary requests "
                f"({', '.join(findings.formats)}), p99 {findings.latency_ms['p99']:.1f} ms "
                f"within the budget {settings.latency_budget_ms:g} ms"
            )
        logging.info(
            "Infra validation (%s): %s: %s",
            findings.server_description,
            "blessed" if blessed else "NOT blessed",
            reason,
        )
        record = {"blessed": blessed, "reason": reason, **findings.as_dict()}
        # Through TFX's file I/O: on Vertex AI the artifact lives in a bucket.
        io_utils.write_string_file(
            os.path.join(output.uri, RESULT_FILE), json.dumps(record, indent=2) + "\n"
        )
        infra_blessing.mark(output, blessed, reason)
        infra_blessing.mark_server(output, findings.server, findings.server_description)


def eval_split_files(examples) -> list[str]:
    """The TFRecord files of the Examples artifact's `eval` split."""
    import tensorflow as tf

    split_names = artifact_utils.decode_split_names(examples.split_names)
    if EVAL_SPLIT not in split_names:
        raise InfraValidationError(
            f"the examples have no {EVAL_SPLIT!r} split to build canary requests from "
            f"(splits: {split_names})"
        )
    split_uri = artifact_utils.get_split_uri([examples], EVAL_SPLIT)
    return sorted(tf.io.gfile.glob(os.path.join(split_uri, "*")))


def validate(
    model_path: str,
    example_files: Sequence[str],
    settings: Settings,
    findings: Findings,
    shared_staging: str | None = None,
) -> None:
    """Runs every check on the SavedModel at `model_path`; raises `InfraValidationError` with
    the reason at the first that fails. `findings` is filled in as the checks go.

    The candidate is staged in a local temporary folder, or under `shared_staging` for a
    server that runs elsewhere (`runners.serves_from_shared_storage`).
    """
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="conveyor-infra-"))
    shared = runners.serves_from_shared_storage(settings.server)
    if shared and not shared_staging:
        raise ValueError(f"a {settings.server.kind} server needs a shared staging folder")
    staging = shared_staging if shared else str(workdir)
    findings.server = settings.server.kind
    runner: ModelServerRunner | None = None
    try:
        base_path = storage.join(staging, "models", settings.model_name)
        stage_version(model_path, storage.join(base_path, "1"))
        runner = runners.make_runner(settings.server, settings.model_name, base_path, workdir)
        findings.server_description = runner.describe()
        server_started = time.monotonic()
        runner.start()
        findings.server_pid = runner.pid
        findings.server_description = runner.describe()  # a Kubernetes job is named now
        # Reading the rows and the in-process answers overlaps with the server's start.
        rows = read_rows(example_files, settings.canary_requests)
        canaries = Canaries.build(model_path, rows)
        runner.wait_until_running(settings.start_timeout_seconds)
        findings.start_seconds = round(time.monotonic() - server_started, 3)
        latencies = send_canaries(runner.get_endpoint(), settings, canaries, findings)
    finally:
        if runner is not None:
            runner.stop()
        shutil.rmtree(workdir, ignore_errors=True)
        if shared:
            storage.remove_tree(staging)
        findings.seconds = time.monotonic() - started
    p50, p99 = (_percentile(latencies, q) for q in (50, 99))
    findings.latency_ms = {"p50": round(p50, 3), "p99": round(p99, 3)}
    if p99 > settings.latency_budget_ms:
        raise InfraValidationError(
            f"latency p99 {p99:.1f} ms over the budget {settings.latency_budget_ms:g} ms "
            f"(push.latency_budget_ms; {len(latencies)} canary requests, p50 {p50:.1f} ms)"
        )


def _percentile(values: Sequence[float], q: float) -> float:
    import numpy as np

    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def stage_version(model_path: str, version_dir: str) -> None:
    """Puts the SavedModel at `version_dir`: a symbolic link for a local model staged locally,
    a copy else."""
    if os.path.isdir(model_path) and not storage.is_remote(version_dir):
        Path(version_dir).parent.mkdir(parents=True, exist_ok=True)
        Path(version_dir).symlink_to(os.path.abspath(model_path), target_is_directory=True)
        return
    io_utils.copy_dir(model_path, version_dir)


def read_rows(example_files: Sequence[str], count: int) -> list[bytes]:
    """Up to `count` serialized tf.Examples, in file order (GZIP files by their `.gz` name)."""
    import tensorflow as tf

    rows: list[bytes] = []
    for path in example_files:
        compression = "GZIP" if path.endswith(".gz") else ""
        for record in tf.data.TFRecordDataset(path, compression_type=compression):
            rows.append(record.numpy())
            if len(rows) >= count:
                return rows
    if not rows:
        raise InfraValidationError("the evaluation split has no rows to build canary requests")
    return rows


@dataclass
class Request:
    """One canary request: where it goes, its body, and what the answer must hold."""

    format: str
    path: str
    body: bytes
    row_format: bool  # answered as `predictions` (rows) or `outputs` (columns)
    expected: dict[str, Any]  # output name -> the in-process answer for this one row


@dataclass
class Canaries:
    """The canary requests for a model (one list per row, a request per format), with the
    in-process answers they must match."""

    by_row: list[list[Request]]
    formats: list[str]

    @classmethod
    def build(cls, model_path: str, rows: Sequence[bytes]) -> Canaries:
        """One request per row and format; the expected answers come from the SavedModel loaded
        in this process, called on all rows as one batch."""
        import tensorflow as tf

        try:
            loaded = tf.saved_model.load(model_path)
        except (OSError, ValueError, tf.errors.OpError) as err:
            raise InfraValidationError(
                f"the SavedModel at {model_path} does not load in process: {_one_line(err)}"
            ) from None
        signatures = dict(loaded.signatures)
        if DEFAULT_SIGNATURE not in signatures:
            raise InfraValidationError(
                f"the SavedModel has no {DEFAULT_SIGNATURE!r} signature, which TF Serving's "
                f"clients call by default (it has {sorted(signatures)})"
            )
        default = signatures[DEFAULT_SIGNATURE]
        inputs = default.structured_input_signature[1]
        serialized = _takes_serialized_examples(default, rows)
        if serialized:
            # TFX's own modules (a `trainer.module` run_fn) serve serialized tf.Examples on
            # serving_default: each canary row is sent as its bytes (base64 in JSON).
            [name] = inputs
            columns = [{name: row} for row in rows]
        else:
            columns = [raw_values(row, inputs) for row in rows]
        try:
            batch = {
                name: tf.constant([c[name] for c in columns], dtype=spec.dtype)
                for name, spec in inputs.items()
            }
            expected = _batched(DEFAULT_SIGNATURE, default(**batch), len(rows))
        except (tf.errors.OpError, ValueError, TypeError) as err:
            raise InfraValidationError(
                f"the SavedModel's {DEFAULT_SIGNATURE} fails on evaluation rows in process: "
                f"{_one_line(err)}"
            ) from None
        by_row: list[list[Request]] = []
        formats = ["rows (instances)", "columns (inputs)"]
        by_example = None
        if _takes_examples(signatures.get(EXAMPLES_SIGNATURE)):
            formats.append(f"tf.Examples ({EXAMPLES_SIGNATURE})")
            try:
                by_example = _batched(
                    EXAMPLES_SIGNATURE,
                    signatures[EXAMPLES_SIGNATURE](tf.constant(list(rows), dtype=tf.string)),
                    len(rows),
                )
            except (tf.errors.OpError, ValueError, TypeError) as err:
                raise InfraValidationError(
                    f"the SavedModel's {EXAMPLES_SIGNATURE} fails on evaluation rows in "
                    f"process: {_one_line(err)}"
                ) from None
        predict = ":predict"
        example_input = (
            next(iter(signatures[EXAMPLES_SIGNATURE].structured_input_signature[1]))
            if by_example is not None
            else None
        )
        for index, (row, values) in enumerate(zip(rows, columns, strict=True)):
            json_row = {
                name: {"b64": base64.b64encode(value).decode()}
                if serialized
                else _json_value(value)
                for name, value in values.items()
            }
            want = _row_of(expected, index)
            columnar = {name: [value] for name, value in json_row.items()}
            requests = [
                Request(formats[0], predict, _dumps({"instances": [json_row]}), True, want),
                Request(formats[1], predict, _dumps({"inputs": columnar}), False, want),
            ]
            if by_example is not None:
                body = {
                    "signature_name": EXAMPLES_SIGNATURE,
                    "instances": [{example_input: {"b64": base64.b64encode(row).decode()}}],
                }
                want = _row_of(by_example, index)
                requests.append(Request(formats[2], predict, _dumps(body), True, want))
            by_row.append(requests)
        return cls(by_row, formats)


def _row_of(outputs: Mapping[str, Any], index: int) -> dict[str, Any]:
    """One row's outputs, each as a numpy array (0-d for a scalar per row)."""
    import numpy as np

    return {name: np.asarray(array[index]) for name, array in outputs.items()}


def _takes_examples(signature) -> bool:
    import tensorflow as tf

    if signature is None:
        return False
    inputs = signature.structured_input_signature[1]
    return len(inputs) == 1 and next(iter(inputs.values())).dtype == tf.string


def _takes_serialized_examples(signature, rows: Sequence[bytes]) -> bool:
    """The signature takes one string input that is not a column of the rows: serialized
    tf.Examples (a raw-row signature with a single text column names that column)."""
    import tensorflow as tf

    if not _takes_examples(signature) or not rows:
        return False
    [name] = signature.structured_input_signature[1]
    return name not in tf.train.Example.FromString(rows[0]).features.feature


def _batched(signature: str, outputs: Mapping[str, Any], rows: int) -> dict[str, Any]:
    """The outputs as numpy arrays, each checked to hold one entry per input row (TF Serving
    splits a batch's answer by its first dimension)."""
    arrays = {name: tensor.numpy() for name, tensor in outputs.items()}
    for name, array in arrays.items():
        if array.ndim == 0 or array.shape[0] != rows:
            raise InfraValidationError(
                f"malformed signature: {signature} output {name!r} has shape {list(array.shape)} "
                f"for {rows} rows; TF Serving needs one entry per row (a first dimension of "
                f"{rows})"
            )
    return arrays


def _dumps(body: Mapping[str, Any]) -> bytes:
    # NaN is how a missing number travels, as TF Serving's JSON parser accepts it.
    return json.dumps(body, allow_nan=True).encode()


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())[:500]


def raw_values(serialized: bytes, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """One raw value per input of the raw-row signature, from a tf.Example; a value the row
    lacks is the trainer's missing marker (NaN, -1 or "")."""
    import tensorflow as tf

    from components.trainer.parsing import MISSING_FLOAT, MISSING_INT, MISSING_STRING

    example = tf.train.Example.FromString(serialized)
    values = {}
    for name, spec in inputs.items():
        feature = example.features.feature.get(name)
        kind = feature.WhichOneof("kind") if feature is not None else None
        found = list(getattr(feature, kind).value) if kind else []
        if spec.dtype == tf.string:
            values[name] = found[0] if found else MISSING_STRING
        elif spec.dtype.is_floating:
            values[name] = float(found[0]) if found else MISSING_FLOAT
        elif spec.dtype.is_integer:
            values[name] = int(found[0]) if found else MISSING_INT
        else:
            raise InfraValidationError(
                f"{DEFAULT_SIGNATURE} input {name!r} is {spec.dtype.name}, which canary rows "
                "cannot fill (string, float and integer inputs can)"
            )
    return values


def _json_value(value: Any) -> Any:
    """A raw value as TF Serving's JSON carries it (bytes that are not UTF-8 as base64)."""
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return {"b64": base64.b64encode(value).decode()}
    return value


def send_canaries(
    endpoint: str, settings: Settings, canaries: Canaries, findings: Findings
) -> list[float]:
    """Checks the model's status, then sends every canary request; returns the latencies (ms).

    Raises `InfraValidationError` at the first answer that is not right.
    """
    import httpx

    findings.formats = canaries.formats
    model_url = f"{endpoint}/v1/models/{settings.model_name}"
    latencies: list[float] = []
    with httpx.Client(timeout=REQUEST_TIMEOUT_SECONDS) as client:
        check_status(client, model_url)
        headers = {"Content-Type": "application/json"}
        for index in range(settings.canary_requests):
            for request in canaries.by_row[index % len(canaries.by_row)]:
                sent = time.perf_counter()
                try:
                    answer = client.post(
                        model_url + request.path, content=request.body, headers=headers
                    )
                except httpx.HTTPError as err:
                    raise InfraValidationError(
                        f"the model server did not answer a {request.format} request: "
                        f"{_one_line(err)}"
                    ) from None
                latencies.append((time.perf_counter() - sent) * 1000)
                findings.requests += 1
                check_answer(request, answer.status_code, answer.content)
    return latencies


def check_status(client, model_url: str) -> None:
    """`GET /v1/models/M` must report version 1 AVAILABLE, as TF Serving's status API does."""
    import httpx

    try:
        answer = client.get(model_url)
        status = answer.json() if answer.status_code == 200 else None
    except (httpx.HTTPError, ValueError) as err:
        raise InfraValidationError(
            f"the model server's status ({model_url}) did not answer: {_one_line(err)}"
        ) from None
    versions = (status or {}).get("model_version_status") or []
    if not any(
        str(v.get("version")) == "1" and v.get("state") == "AVAILABLE"
        for v in versions
        if isinstance(v, dict)
    ):
        raise InfraValidationError(
            f"the model server does not report version 1 AVAILABLE: HTTP {answer.status_code} "
            f"{_one_line(answer.text)[:300]}"
        )


def check_answer(request: Request, status: int, content: bytes) -> None:
    """Raises `InfraValidationError` unless the answer is HTTP 200, shaped as the signature's
    outputs for one row, finite, and equal to the in-process answer."""
    import numpy as np

    def malformed(what: str) -> InfraValidationError:
        return InfraValidationError(f"malformed answer to a {request.format} request: {what}")

    if status != 200:
        raise InfraValidationError(
            f"the model server answered HTTP {status} to a {request.format} request: "
            f"{_one_line(content.decode(errors='replace'))[:300]}"
        )
    try:
        payload = json.loads(content)
    except ValueError:
        raise malformed(f"not JSON: {content[:200]!r}") from None
    got = _one_row(payload, request, malformed)
    for name, want in request.expected.items():
        value = got[name]
        if want.dtype.kind in "SUO":  # strings: compared as text
            if _text(value) != _text(want.tolist()):
                raise InfraValidationError(
                    f"the {request.format} answer's {name!r} is {value!r}, the SavedModel's "
                    f"in-process answer {_text(want.tolist())!r}"
                )
            continue
        try:
            array = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            raise malformed(f"{name!r} is {str(value)[:100]}, not numbers") from None
        if array.shape != want.shape:
            raise malformed(
                f"{name!r} has shape {list(array.shape)} per row, the signature's "
                f"{list(want.shape)}"
            )
        if not np.all(np.isfinite(array)):
            raise malformed(f"{name!r} is not finite: {str(value)[:100]}")
        expected = want.astype(np.float64)
        if not np.allclose(array, expected, rtol=RELATIVE_TOLERANCE, atol=ABSOLUTE_TOLERANCE):
            worst = float(np.max(np.abs(array - expected) / np.maximum(np.abs(expected), 1e-30)))
            raise InfraValidationError(
                f"the {request.format} answer's {name!r} differs from the SavedModel's "
                f"in-process answer by up to {worst:.3g} relative (tolerance "
                f"{RELATIVE_TOLERANCE:g}): {str(value)[:100]} vs {expected.tolist()!s:.100}"
            )


def _one_row(payload: Any, request: Request, malformed) -> dict[str, Any]:
    """The answer for the one row sent, as {output name: value}; TF Serving leaves the names
    out when the signature has one output."""
    names = sorted(request.expected)
    key = "predictions" if request.row_format else "outputs"
    if not isinstance(payload, dict) or key not in payload:
        raise malformed(f"no {key!r} in {str(payload)[:200]}")
    answer = payload[key]
    if request.row_format:
        if not isinstance(answer, list) or len(answer) != 1:
            raise malformed(f"{key!r} should hold 1 row: {str(answer)[:200]}")
        row = answer[0]
        if len(names) == 1 and not (isinstance(row, dict) and set(row) == set(names)):
            return {names[0]: row}
    else:
        if len(names) == 1 and not (isinstance(answer, dict) and set(answer) == set(names)):
            answer = {names[0]: answer}
        if not isinstance(answer, dict):
            raise malformed(f"{key!r} should map output names to columns: {str(answer)[:200]}")
        row = {}
        for name, column in answer.items():
            if not isinstance(column, list) or len(column) != 1:
                raise malformed(f"{key!r}[{name!r}] should hold 1 row: {str(column)[:200]}")
            row[name] = column[0]
    if not isinstance(row, dict) or sorted(row) != names:
        found = sorted(row) if isinstance(row, dict) else type(row).__name__
        raise malformed(f"outputs {found}, the signature's {names}")
    return row


def _text(value: Any) -> Any:
    """Strings as text, whether bytes, TF Serving's {"b64": ...} or nested lists of them."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, dict) and set(value) == {"b64"}:
        return _text(base64.b64decode(value["b64"]))
    if isinstance(value, list):
        return [_text(v) for v in value]
    return value
