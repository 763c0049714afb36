"""`conveyor infer`: a served (or named) version of a pipeline's model over one span's input
files, on Beam, written as TFX's BulkInferrer writes it and recorded in ML Metadata.

The input is the span's CSV or Parquet files as they are (not a run's examples): each row
becomes a tf.Example typed as the model's `serving_default` inputs are, rows travel in batches
of BATCH_ROWS, and `inference.signature` answers a batch at a time
(components/bulk_inferrer/batched.py), logged as the PredictionLogs tfx_bsl's RunInference
(what TFX's BulkInferrer runs) writes. The output folder holds `prediction_logs-*.gz`
(PredictionLog TFRecords, an InferenceResult), with `inference.output_columns` the table
`predictions-*.csv` (or `.parquet`) that the pipeline's PredictionTable node writes from the
same logs, and `bad_rows.csv`: every row that could not be read, by file, line and reason. A bad
row is counted and named, never dropped in silence.
"""

from __future__ import annotations

import csv
import datetime
import io
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from pipelines.core.paths import RunPaths
from pipelines.spec.models import runner_beam_args

INFERENCE_FOLDER = "inference"  # <workdir>/inference/<pipeline>/<run>/
INFERENCE_TYPE = "conveyor.BatchInference"  # the execution `conveyor infer` records
INFERENCE_RESULT_TYPE = "InferenceResult"  # TFX's standard_artifacts.InferenceResult
SHOWN_BAD_ROWS = 10  # named on the terminal; bad_rows.csv names them all
BATCH_ROWS = 1000  # rows per element of the Beam pipeline, and per call of the signature
_PARSED, _BAD = "parsed", "bad"  # components.bulk_inferrer.batched's tags

# tensorflow/core/framework/types.proto: the DataTypes of raw-column inputs, by kind of value.
_DT_FLOATS = {1, 2, 19}  # DT_FLOAT, DT_DOUBLE, DT_HALF
_DT_INTS = {3, 9}  # DT_INT32, DT_INT64
_DT_STRING = 7


class InferError(ValueError):
    """The version, span or model cannot be inferred with; the message says which and why."""


@dataclass(frozen=True)
class BadRow:
    """A row of the input that could not become a tf.Example."""

    file: str
    line: int
    reason: str

    def describe(self) -> str:
        """`file:line: reason`, as compilers name a place."""
        return f"{self.file}:{self.line}: {self.reason}"


@dataclass
class Inferred:
    """What one `conveyor infer` did: the version, the span, the counts and where it wrote."""

    version: int
    model_dir: str
    span: int | None
    output_dir: str
    files: list[str]
    rows: int = 0
    bad_rows: int = 0
    first_bad: list[BadRow] = field(default_factory=list)
    table_files: list[str] = field(default_factory=list)
    seconds: float = 0.0


# --- which version ------------------------------------------------------------------------------


def chosen_version(paths: RunPaths, version: int | None, label: str | None) -> int:
    """The version to infer with: `version` when given (a version folder on disk), the one
    `label` points to in models.config, else the served one (`stable`'s version, else the
    newest version served)."""
    from pipelines import serving_state

    if version is not None and label:
        raise InferError("give --version or --label, not both")
    table = serving_state.models_table(paths)
    on_disk = {row.version for row in table.rows if not row.note}
    labels = dict(table.entry.labels) if table.entry else {}
    if version is not None:
        if version not in on_disk:
            raise InferError(
                f"no version {version} of {paths.spec.push.model_name} in {paths.serving_dir} "
                f"(versions: {', '.join(map(str, sorted(on_disk))) or 'none'})"
            )
        return version
    if label:
        if label not in labels:
            raise InferError(
                f"models.config has no label {label!r} for {paths.spec.push.model_name} "
                f"(labels: {', '.join(sorted(labels)) or 'none'})"
            )
        return labels[label]
    if "stable" in labels:
        return labels["stable"]
    if not on_disk:
        raise InferError(
            f"no version of {paths.spec.push.model_name} is served from {paths.serving_dir}: "
            "run the pipeline until it pushes one, or name a --version"
        )
    return max(on_disk)


# --- rows into tf.Examples ----------------------------------------------------------------------


def model_columns(model_dir: str) -> dict[str, str]:
    """Column -> `int`, `float` or `string`: the raw inputs of the model's `serving_default`
    (what Conveyor's trainer exports), read from saved_model.pb without loading the model."""
    from tensorflow.core.protobuf import saved_model_pb2

    from pipelines.core import storage

    graph = saved_model_pb2.SavedModel.FromString(
        storage.read_bytes(storage.join(model_dir, "saved_model.pb"))
    )
    signature = graph.meta_graphs[0].signature_def.get("serving_default")
    if signature is None or not signature.inputs:
        raise InferError(f"{model_dir} has no serving_default signature to read its columns from")
    columns = {}
    for name, tensor in signature.inputs.items():
        if tensor.dtype in _DT_FLOATS:
            columns[name] = "float"
        elif tensor.dtype in _DT_INTS:
            columns[name] = "int"
        elif tensor.dtype == _DT_STRING:
            columns[name] = "string"
        else:
            raise InferError(
                f"{model_dir}: serving_default input {name!r} is of DataType "
                f"{tensor.dtype}, not a number or a string"
            )
    if list(columns) == ["examples"] and columns["examples"] == "string":
        raise InferError(
            f"{model_dir}: serving_default takes serialized tf.Examples, not columns; "
            "`conveyor infer` reads raw columns as Conveyor's trainer exports them"
        )
    return columns


@dataclass(frozen=True)
class RowReader:
    """Turns one input file's rows (CSV, or Parquet with `file_format="parquet"`) into
    serialized tf.Examples: the model's columns typed as its `serving_default` takes them, the
    other named columns (`keep`) as text. An empty CSV field or a Parquet null is a missing
    value: a feature with no values, as TFX's CSV and Parquet reading write it."""

    columns: Mapping[str, str]
    keep: Sequence[str] = ()
    file_format: str = "csv"

    @property
    def layout(self) -> list[tuple[str, str]]:
        """(column, kind) of every feature an example gets, in order."""
        kept = [(c, "string") for c in self.keep if c not in self.columns]
        return [*self.columns.items(), *kept]

    def rows(self, name: str, stream: io.BufferedIOBase) -> Iterator[tuple[int, list] | BadRow]:
        """(line, typed values in `layout` order, None where missing) per good row, a BadRow
        per bad one. A Parquet file's "line" is its row's number, from 1."""
        if self.file_format == "parquet":
            yield from self._parquet_rows(name, stream)
            return
        lines = _Lines(stream)
        reader = csv.reader(lines)
        try:
            header = next(reader)
        except StopIteration:
            return
        except (csv.Error, UnicodeDecodeError) as err:
            yield BadRow(name, 1, f"the header cannot be read: {err}")
            return
        missing = [c for c in self.columns if c not in header]
        position = {c: i for i, c in enumerate(header)}
        # A kept column the file lacks is missing in every row, not an error: it is no input.
        fields = [(c, k, position.get(c)) for c, k in self.layout]
        while True:
            line = lines.number + 1
            try:
                values = next(reader)
            except StopIteration:
                return
            except (csv.Error, UnicodeDecodeError) as err:
                yield BadRow(name, line, f"the row cannot be read: {err}")
                continue
            if not values:
                continue  # a blank line is no row, as in TFX's CSV reading
            if missing:
                yield BadRow(name, line, f"no column {', '.join(missing)} (a model input)")
                continue
            if len(values) != len(header):
                yield BadRow(name, line, f"{len(values)} fields where the header has {len(header)}")
                continue
            try:
                yield line, [_typed(c, k, values[i] if i is not None else "") for c, k, i in fields]
            except ValueError as err:
                yield BadRow(name, line, str(err))

    def _parquet_rows(
        self, name: str, stream: io.BufferedIOBase
    ) -> Iterator[tuple[int, list] | BadRow]:
        """`rows` of a Parquet file, read a row group's batch at a time. Parquet columns are
        typed: a model column whose type the model cannot take (text for a number, a float for
        an integer, a list) fails each row, naming the column and both types, as a CSV field
        that is no number fails its row."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            parquet = pq.ParquetFile(stream)
        except (pa.ArrowException, OSError) as err:
            yield BadRow(name, 1, f"not a Parquet file: {err}")
            return
        schema = parquet.schema_arrow
        missing = [c for c in self.columns if c not in schema.names]
        wrong = [
            reason
            for column, kind in self.columns.items()
            if column in schema.names
            and (reason := _parquet_type_error(column, kind, schema.field(column).type))
        ]
        fields = [(c, k, c in schema.names, c in self.columns) for c, k in self.layout]
        present = [c for c, _, there, _ in fields if there]
        number = 0
        for batch in parquet.iter_batches(batch_size=BATCH_ROWS, columns=present):
            values = {c: batch.column(c).to_pylist() for c in present}
            for index in range(batch.num_rows):
                number += 1
                if missing:
                    yield BadRow(name, number, f"no column {', '.join(missing)} (a model input)")
                elif wrong:
                    yield BadRow(name, number, wrong[0])
                else:
                    yield (
                        number,
                        [
                            _from_parquet(values[c][index], k if model else "text")
                            if there
                            else None
                            for c, k, there, model in fields
                        ],
                    )

    def examples(self, name: str, stream: io.BufferedIOBase) -> Iterator[tuple[str, object]]:
        """(`parsed`, serialized tf.Example) per good row, (`bad`, BadRow) per bad one: one row
        at a time, protocol buffers built in Python."""
        from tensorflow.core.example import example_pb2

        layout = self.layout
        for row in self.rows(name, stream):
            if isinstance(row, BadRow):
                yield _BAD, row
                continue
            example = example_pb2.Example()
            features = example.features.feature
            for (column, kind), value in zip(layout, row[1], strict=True):
                values = getattr(features[column], _LIST_FIELDS[kind])
                values.SetInParent()
                if value is not None:
                    values.value.append(value)
            yield _PARSED, example.SerializeToString()

    def batches(
        self, name: str, stream: io.BufferedIOBase, size: int
    ) -> Iterator[tuple[str, object]]:
        """(`parsed`, [serialized tf.Example, ...]) per `size` good rows (the last batch
        shorter), (`bad`, BadRow) per bad one. The examples are equal to `examples()`', encoded
        by tfx_bsl's C++ RecordBatchToExamplesEncoder from Arrow columns."""
        columns: list[list] = []
        for row in self.rows(name, stream):
            if isinstance(row, BadRow):
                yield _BAD, row
                continue
            columns.append(row[1])
            if len(columns) == size:
                yield _PARSED, self._encode(columns)
                columns = []
        if columns:
            yield _PARSED, self._encode(columns)

    def _encode(self, rows: list[list]) -> list[bytes]:
        import pyarrow as pa
        from tfx_bsl.coders import example_coder

        arrays, names = [], []
        for index, (column, kind) in enumerate(self.layout):
            offsets, values = [0], []
            for row in rows:
                value = row[index]
                if value is not None:
                    values.append(value)
                offsets.append(len(values))
            arrays.append(
                pa.LargeListArray.from_arrays(
                    pa.array(offsets, pa.int64()), pa.array(values, _ARROW_TYPES[kind]())
                )
            )
            names.append(column)
        batch = pa.RecordBatch.from_arrays(arrays, names)
        return example_coder.RecordBatchToExamplesEncoder().encode(batch)


_LIST_FIELDS = {"string": "bytes_list", "int": "int64_list", "float": "float_list"}


def _arrow_type(name: str) -> Callable[[], object]:
    def make() -> object:
        import pyarrow as pa

        return getattr(pa, name)()

    return make


_ARROW_TYPES = {
    "string": _arrow_type("large_binary"),
    "int": _arrow_type("int64"),
    "float": _arrow_type("float32"),
}


def _typed(column: str, kind: str, text: str) -> object:
    """A CSV field as the model's column takes it: bytes, int or float; None when empty."""
    if text == "":
        return None
    if kind == "string":
        return text.encode()
    try:
        return int(text) if kind == "int" else float(text)
    except ValueError:
        what = "an integer" if kind == "int" else "a number"
        raise ValueError(f"column {column}: {text!r} is not {what}") from None


def _parquet_type_error(column: str, kind: str, arrow_type) -> str | None:
    """Why a Parquet column of `arrow_type` cannot feed a model input of `kind`, or None."""
    import pyarrow as pa

    types = pa.types
    takes = {
        "float": types.is_floating(arrow_type)
        or types.is_integer(arrow_type)
        or types.is_decimal(arrow_type),
        "int": types.is_integer(arrow_type),
        "string": types.is_string(arrow_type)
        or types.is_large_string(arrow_type)
        or types.is_binary(arrow_type)
        or types.is_large_binary(arrow_type),
    }[kind]
    if takes:
        return None
    wanted = {"float": "numbers", "int": "integers", "string": "text"}[kind]
    return f"column {column} holds {arrow_type}, where the model takes {wanted}"


def _from_parquet(value: object, kind: str) -> object:
    """A Parquet value as the model's column takes it (`text`: a kept column, any value as its
    text); None stays None, a missing value."""
    if value is None:
        return None
    if kind == "float":
        return float(value)
    if kind == "int":
        return int(value)
    if isinstance(value, bytes):
        return value
    return str(value).encode()


class _Lines:
    """A binary stream's lines as text, counting them: a line that is not UTF-8 fails alone,
    where a text wrapper would fail the rest of the file."""

    def __init__(self, stream: io.BufferedIOBase):
        self._stream = stream
        self.number = 0

    def __iter__(self) -> _Lines:
        return self

    def __next__(self) -> str:
        raw = self._stream.readline()
        if not raw:
            raise StopIteration
        self.number += 1
        return raw.decode("utf-8")


# --- the Beam pipeline --------------------------------------------------------------------------


def output_folder(paths: RunPaths, span: int | None, version: int) -> str:
    """`<workdir>/inference/<pipeline>/<span>-v<version>-<UTC time>`: one per `conveyor infer`."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    night = "all" if span is None else f"span-{span}"
    return str(paths.workdir / INFERENCE_FOLDER / paths.spec.name / f"{night}-v{version}-{stamp}")


def infer(
    paths: RunPaths,
    span: int | None,
    version: int,
    output_dir: str | None = None,
    beam_args: Sequence[str] | None = None,
    echo: Callable[[str], None] = print,
) -> Inferred:
    """Runs `version` over the span's input files (every input file without spans) on Beam and
    writes the PredictionLogs, the table and the bad rows into `output_dir` (default:
    `output_folder`); records the run in ML Metadata. Raises InferError when there is nothing
    to read or the model has no raw columns."""
    from pipelines.core import storage
    from pipelines.run.fingerprint import input_files

    spec = paths.spec
    if spec.data.format.value not in ("csv", "parquet"):
        raise InferError(
            f"{spec.name}: data.format {spec.data.format.value!r}: `conveyor infer` reads CSV "
            "and Parquet input; a `bulk_inferrer` component predicts a run's examples of any "
            "format"
        )
    model_dir = storage.join(str(paths.serving_dir), str(version))
    files = (
        [str(f) for f in input_files(paths, span)]
        if span is None
        else [str(f) for f in _span_files(paths, span)]
    )
    if not files:
        raise InferError(f"{spec.name}: no input files under {paths.input_dir}")
    inferred = Inferred(
        version=version,
        model_dir=model_dir,
        span=span,
        output_dir=output_dir or output_folder(paths, span, version),
        files=files,
    )
    started = time.monotonic()
    columns = model_columns(model_dir)
    reader = RowReader(
        columns=columns,
        keep=tuple(spec.inference.output_columns),
        file_format=spec.data.format.value,
    )
    echo(f"infer {spec.name} version {version} over {len(files)} file(s) -> {inferred.output_dir}")
    beam_args = runner_beam_args(spec.runtime.beam_args if beam_args is None else beam_args)
    run_beam(inferred, reader, spec.inference.signature, beam_args)
    if spec.inference.output_columns and inferred.rows:
        inferred.table_files = write_table_files(
            inferred.output_dir,
            spec.inference.output_columns,
            spec.inference.output_format.value,
            beam_args,
        )
    inferred.seconds = time.monotonic() - started
    record(paths, inferred)
    return inferred


def _span_files(paths: RunPaths, span: int) -> list:
    from pipelines.builder.spans import span_files

    return span_files(paths.spec, paths.input_dir, span)


def run_beam(inferred: Inferred, reader: RowReader, signature: str, beam_args: list[str]) -> None:
    """The Beam pipeline: files -> batches of rows -> the signature -> PredictionLogs, bad rows
    aside (components/bulk_inferrer/batched.py); fills `inferred`'s counts and first bad
    rows."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from components.bulk_inferrer.batched import BAD, PARSED, PredictBatches, ReadRowBatches
    from components.bulk_inferrer.rows import BAD_ROWS_FILE, PREDICTION_LOGS_PREFIX
    from components.bulk_inferrer.table import counter_value
    from pipelines.core import storage

    output = inferred.output_dir
    storage.makedirs(output)
    pipeline = beam.Pipeline(options=PipelineOptions(beam_args))
    rows = (
        pipeline
        | "InputFiles" >> beam.Create(inferred.files)
        | "ReadRows"
        >> beam.ParDo(ReadRowBatches(reader, BATCH_ROWS)).with_outputs(BAD, main=PARSED)
    )
    _ = (
        rows[PARSED]
        | "Predict" >> beam.ParDo(PredictBatches(inferred.model_dir, signature))
        | "WritePredictionLogs"
        >> beam.io.WriteToTFRecord(f"{output}/{PREDICTION_LOGS_PREFIX}", file_name_suffix=".gz")
    )
    _ = (
        rows[BAD]
        | "BadRowLines" >> beam.Map(lambda b: _csv_line([b.file, b.line, b.reason]))
        | "WriteBadRows"
        >> beam.io.WriteToText(
            f"{output}/{BAD_ROWS_FILE}",
            shard_name_template="",
            header="file,line,reason",
        )
    )
    result = pipeline.run()
    inferred.rows = counter_value(result, "predictions")
    inferred.bad_rows = counter_value(result, "bad_rows")
    if inferred.bad_rows:
        inferred.first_bad = read_bad_rows(f"{output}/{BAD_ROWS_FILE}", SHOWN_BAD_ROWS)


def _csv_line(values: Sequence) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="").writerow(values)
    return buffer.getvalue()


def read_bad_rows(path: str, limit: int) -> list[BadRow]:
    """The first `limit` bad rows `bad_rows.csv` names."""
    from pipelines.core import storage

    text = storage.read_bytes(path).decode()
    found = []
    for row in list(csv.reader(io.StringIO(text)))[1 : limit + 1]:
        found.append(BadRow(row[0], int(row[1]), row[2]))
    return found


def write_table_files(
    output_dir: str, columns: Sequence[str], table_format: str, beam_args: list[str]
) -> list[str]:
    """The table of `columns` and every prediction from the PredictionLogs in `output_dir`, as
    the pipeline's PredictionTable node writes it; returns its files."""
    import apache_beam as beam
    import tensorflow as tf
    from apache_beam.options.pipeline_options import PipelineOptions
    from tensorflow_serving.apis import prediction_log_pb2

    from components.bulk_inferrer.rows import PREDICTION_LOGS_GLOB, TABLE_PREFIX
    from components.bulk_inferrer.table import first_prediction_log, write_table

    logs_glob = f"{output_dir}/{PREDICTION_LOGS_GLOB}"
    first = first_prediction_log(sorted(tf.io.gfile.glob(logs_glob)))
    pipeline = beam.Pipeline(options=PipelineOptions(beam_args))
    logs = pipeline | "ReadPredictionLogs" >> beam.io.ReadFromTFRecord(
        logs_glob, coder=beam.coders.ProtoCoder(prediction_log_pb2.PredictionLog)
    )
    write_table(logs, first, columns, table_format, output_dir)
    pipeline.run().wait_until_finish()
    return sorted(tf.io.gfile.glob(f"{output_dir}/{TABLE_PREFIX}-*"))


# --- ML Metadata --------------------------------------------------------------------------------


def record(paths: RunPaths, inferred: Inferred) -> int:
    """Records one `conveyor.BatchInference` execution in the pipeline's context: its input the
    PushedModel of the version used (when ML Metadata recorded that push), its output an
    InferenceResult at the output folder; both carry the version. Returns the execution id."""
    from ml_metadata.proto import metadata_store_pb2

    from pipelines.core import metadata

    store = metadata.open_store(paths.spec, paths.metadata_path)
    if store is None:
        raise InferError(f"no ML Metadata store at {paths.metadata_path}")
    execution_type = store.put_execution_type(metadata_store_pb2.ExecutionType(name=INFERENCE_TYPE))
    artifact_type = store.put_artifact_type(
        metadata_store_pb2.ArtifactType(name=INFERENCE_RESULT_TYPE)
    )
    execution = metadata_store_pb2.Execution(
        type_id=execution_type, last_known_state=metadata_store_pb2.Execution.COMPLETE
    )
    result = metadata_store_pb2.Artifact(
        type_id=artifact_type, uri=inferred.output_dir, state=metadata_store_pb2.Artifact.LIVE
    )
    for message in (execution, result):
        values = message.custom_properties
        values["model_version"].int_value = inferred.version
        values["model_dir"].string_value = inferred.model_dir
        values["rows"].int_value = inferred.rows
        values["bad_rows"].int_value = inferred.bad_rows
        values["span"].int_value = -1 if inferred.span is None else inferred.span
    execution.custom_properties["seconds"].double_value = inferred.seconds
    execution.custom_properties["input_files"].string_value = "\n".join(inferred.files)
    pushes = metadata.successful_pushes(store, paths.spec.name) or []
    pushed = [
        p
        for p in pushes
        if str(metadata.custom_property(p, "pushed_version")) == str(inferred.version)
    ]
    events = []
    if pushed:
        events.append((pushed[-1], metadata_store_pb2.Event(type=metadata_store_pb2.Event.INPUT)))
    events.append((result, metadata_store_pb2.Event(type=metadata_store_pb2.Event.OUTPUT)))
    pipeline = store.get_context_by_type_and_name("pipeline", paths.spec.name)
    execution_id, _, _ = store.put_execution(
        execution, events, [pipeline] if pipeline is not None else []
    )
    return execution_id
