"""Batch inference, end to end on penguin (ci profile), in one workdir: a run whose components
end with a `bulk_inferrer` (TFX's BulkInferrer over the eval split, then the prediction table)
and `conveyor infer` with the version it pushed, on good rows and on bad ones. Predictions are
read back from the PredictionLogs and compared with the SavedModel's own signature called on the
same rows; both compile for Kubeflow and Airflow with the node in them."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import tensorflow as tf
from tensorflow_serving.apis import prediction_log_pb2

from components.bulk_inferrer.rows import logged_example, logged_outputs
from pipelines import cli
from pipelines.core import metadata
from pipelines.core.paths import RunPaths
from pipelines.ops import nightly
from pipelines.ops.infer import INFERENCE_TYPE
from pipelines.run.kubeflow import job_tasks
from pipelines.spec.loading import load_spec
from tests.conftest import run_artifacts

COMPONENTS = (
    "components=[{type: csv_example_gen}, {type: statistics_gen}, {type: schema_gen}, "
    "{type: example_validator}, {type: data_gate}, {type: trainer}, {type: baseline_resolver}, "
    "{type: evaluator}, {type: bulk_inferrer}, {type: pusher}]"
)
INFERENCE = [COMPONENTS, "inference.splits=[eval]", "inference.output_columns=[island, species]"]
SIGNATURE = "serving_examples"
PENGUIN_ROWS = 344  # the rows of the palmerpenguins CSV `conveyor data penguin` writes


def _logs(files) -> list:
    records = tf.data.TFRecordDataset([str(f) for f in files], compression_type="GZIP")
    return [prediction_log_pb2.PredictionLog.FromString(r.numpy()) for r in records]


def _examples(folder: Path) -> list[bytes]:
    files = sorted(str(f) for f in folder.glob("*.gz"))
    return [r.numpy() for r in tf.data.TFRecordDataset(files, compression_type="GZIP")]


def _same_as_the_signature(logs: list, model_dir: str) -> None:
    """Every logged output equals the SavedModel's signature called on the logged example."""
    serialized = [logged_example(log).SerializeToString() for log in logs]
    signature = tf.saved_model.load(model_dir).signatures[SIGNATURE]
    called = signature(examples=tf.constant(serialized))
    for i, log in enumerate(logs):
        for name, values in logged_outputs(log).items():
            np.testing.assert_allclose(values, called[name].numpy()[i].ravel(), rtol=1e-6)


def _run_inference(examples: list, model_dir: Path, folder: Path) -> list[bytes]:
    """The serialized PredictionLogs tfx_bsl's RunInference gives `examples`, in their order."""
    import apache_beam as beam
    from tfx_bsl.public.beam import run_inference
    from tfx_bsl.public.proto import model_spec_pb2

    spec = model_spec_pb2.InferenceSpecType(
        saved_model_spec=model_spec_pb2.SavedModelSpec(
            model_path=str(model_dir), signature_name=[SIGNATURE]
        )
    )
    with beam.Pipeline() as pipeline:
        _ = (
            pipeline
            | beam.Create(examples)
            | run_inference.RunInference(spec)
            | beam.Map(lambda log: log.SerializeToString())
            | beam.io.WriteToTFRecord(str(folder / "logs"), file_name_suffix=".gz")
        )
    records = tf.data.TFRecordDataset(
        [str(f) for f in sorted(folder.glob("logs*.gz"))], compression_type="GZIP"
    )
    by_example = {}
    for record in records:
        log = prediction_log_pb2.PredictionLog.FromString(record.numpy())
        by_example[logged_example(log).SerializeToString()] = record.numpy()
    return [by_example[e.SerializeToString()] for e in examples]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("bulk_inferrer")
    assert cli.main(["data", "penguin", "--workdir", str(workdir)]) == 0
    loaded = load_spec("penguin", env="ci", overrides=INFERENCE, workdir=workdir)
    result = nightly.run(loaded, workdir, echo=lambda _: None)
    return RunPaths(workdir=workdir, spec=loaded.spec), result


def test_the_bulk_inferrer_predicts_every_eval_row_as_the_saved_model_does(run):
    paths, result = run
    assert result.outcome == "pushed", result.message
    store = metadata.open_store(paths.spec, paths.metadata_path)
    (inference,) = run_artifacts(store, result.run_id, "InferenceResult")
    (model,) = run_artifacts(store, result.run_id, "Model")
    examples = max(run_artifacts(store, result.run_id, "Examples"), key=lambda a: a.id)
    logs = _logs(sorted(Path(inference.uri).glob("prediction_logs-*.gz")))
    eval_rows = _examples(Path(examples.uri) / "Split-eval")
    assert len(logs) == len(eval_rows) > 0
    # The logs answer exactly the eval split's examples, each once.
    assert sorted(logged_example(log).SerializeToString() for log in logs) == sorted(eval_rows)
    _same_as_the_signature(logs, str(Path(model.uri) / "Format-Serving"))

    (table,) = run_artifacts(store, result.run_id, "conveyor.PredictionTable")
    (table_file,) = Path(table.uri).glob("predictions-*.csv")
    rows = list(csv.DictReader(table_file.open()))
    assert len(rows) == len(logs)
    assert list(rows[0])[:3] == ["island", "species", "class_ids"]

    def described(island, species, class_id, probabilities):
        return (island, species, int(class_id), *(round(float(p), 5) for p in probabilities))

    from_logs = []
    for log in logs:
        example, outputs = logged_example(log).features.feature, logged_outputs(log)
        inputs = [example[c].bytes_list.value[0].decode() for c in ("island", "species")]
        from_logs.append(described(*inputs, outputs["class_ids"][0], outputs["probabilities"]))
    from_table = [
        described(
            r["island"], r["species"], r["class_ids"], [r[f"probabilities_{i}"] for i in range(3)]
        )
        for r in rows
    ]
    assert sorted(from_table) == sorted(from_logs)


def test_conveyor_infer_runs_the_served_version_over_every_row_and_records_it(
    run, capsys, tmp_path
):
    paths, _ = run
    workdir = str(paths.workdir)
    output = paths.workdir / "inferred"
    argv = ["infer", "penguin", "--env", "ci", "--workdir", workdir, "--output", str(output)]
    argv += ["--set", "inference.output_columns=[island, sex]"]
    assert cli.main([*argv, "--set", "inference.output_format=parquet"]) == 0
    assert f"predicted {PENGUIN_ROWS} rows" in capsys.readouterr().out
    logs = _logs(sorted(output.glob("prediction_logs-*.gz")))
    assert len(logs) == PENGUIN_ROWS
    _same_as_the_signature(logs, str(paths.serving_dir / "1"))
    # Each log is the one tfx_bsl's RunInference (TFX's BulkInferrer) writes for its example.
    examples = [logged_example(log) for log in logs[:40]]
    by_bsl = _run_inference(examples, paths.serving_dir / "1", tmp_path)
    # (As messages: the order a map's entries are serialized in is not fixed.)
    assert logs[:40] == [prediction_log_pb2.PredictionLog.FromString(b) for b in by_bsl]
    table = pq.read_table([str(p) for p in sorted(output.glob("predictions-*.parquet"))])
    assert table.num_rows == PENGUIN_ROWS
    assert table.column_names[:2] == ["island", "sex"]
    assert None in table.column("sex").to_pylist()  # a missing value stays missing

    store = metadata.open_store(paths.spec, paths.metadata_path)
    (execution,) = [
        e
        for e in store.get_executions()
        if e.type_id == store.get_execution_type(INFERENCE_TYPE).id
    ]
    assert metadata.custom_property(execution, "model_version") == 1
    assert metadata.custom_property(execution, "rows") == PENGUIN_ROWS
    events = store.get_events_by_execution_ids([execution.id])
    linked = {a.type: a for a in store.get_artifacts_by_id([e.artifact_id for e in events])}
    assert linked["InferenceResult"].uri == str(output)
    assert str(metadata.custom_property(linked["PushedModel"], "pushed_version")) == "1"


def test_conveyor_infer_reads_parquet_input_as_the_same_rows_in_csv(run, capsys, tmp_path):
    import pyarrow.csv

    paths, _ = run
    (source,) = paths.input_dir.glob("*.csv")
    folder = paths.workdir / "parquet"  # data.input_dir is relative to the workdir
    folder.mkdir()
    # Arrow types the columns as a Parquet export would: int64 with nulls, doubles, strings;
    # an empty CSV field is a null there (in Parquet "" is a value, as in TFX's reading).
    missing_is_null = pyarrow.csv.ConvertOptions(strings_can_be_null=True)
    table = pyarrow.csv.read_csv(source, convert_options=missing_is_null)
    pq.write_table(table, folder / "penguins.parquet")
    argv = ["infer", "penguin", "--env", "ci", "--workdir", str(paths.workdir), "--version", "1"]
    parquet = ["--set", "data.format=parquet", "--set", "data.input_dir=parquet"]
    logged = {}
    for data_format, sets in (("csv", []), ("parquet", parquet)):
        output = tmp_path / data_format
        assert cli.main([*argv, *sets, "--output", str(output)]) == 0
        assert f"predicted {PENGUIN_ROWS} rows" in capsys.readouterr().out
        logged[data_format] = _logs(sorted(output.glob("prediction_logs-*.gz")))
    _same_as_the_signature(logged["parquet"], str(paths.serving_dir / "1"))

    def examples(logs):
        return sorted(logged_example(log).SerializeToString(deterministic=True) for log in logs)

    assert examples(logged["parquet"]) == examples(logged["csv"])


def test_infer_reads_only_the_nights_span_with_the_labelled_version(run, capsys):
    paths, _ = run
    (source,) = paths.input_dir.glob("*.csv")
    lines = source.read_text().splitlines(keepends=True)
    for night, rows in (("2026-11-27", 50), ("2026-11-28", 30)):
        folder = paths.workdir / "nights" / night
        folder.mkdir(parents=True)
        (folder / "penguins.csv").write_text("".join(lines[: rows + 1]))
    output = paths.workdir / "night"
    argv = ["infer", "penguin", "--env", "ci", "--workdir", str(paths.workdir)]
    argv += [
        "--set",
        "data.input_dir=nights",
        "--set",
        'data.span_pattern="{YYYY}-{MM}-{DD}/*.csv"',
    ]
    assert (
        cli.main([*argv, "--date", "2026-11-28", "--label", "stable", "--output", str(output)]) == 0
    )
    assert "predicted 30 rows of 2026-11-28 (span 20785) with version 1" in capsys.readouterr().out
    assert len(_logs(sorted(output.glob("prediction_logs-*.gz")))) == 30


def test_bad_rows_are_counted_and_named_by_file_and_line(run, tmp_path, capsys):
    paths, _ = run
    (source,) = paths.input_dir.glob("*.csv")
    lines = source.read_bytes().splitlines(keepends=True)
    header = lines[0].decode().strip().split(",")
    bad_number = lines[5].decode().split(",")
    bad_number[header.index("bill_length_mm")] = "long"
    folder = paths.workdir / "spoilt"  # data.input_dir is relative to the workdir
    folder.mkdir()
    spoilt = [
        *lines[:5],
        ",".join(bad_number).encode(),  # line 6
        b"Adelie,Torgersen\n",  # line 7: two fields
        b"\xff\xfe not utf-8\n",  # line 8
        *lines[5:],
    ]
    (folder / "penguins.csv").write_bytes(b"".join(spoilt))
    without = [c for c in header if c != "body_mass_g"]
    with (folder / "no_mass.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, without, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(list(csv.DictReader(source.open()))[:2])
    output = tmp_path / "out"
    argv = ["infer", "penguin", "--env", "ci", "--workdir", str(paths.workdir)]
    argv += ["--set", "data.input_dir=spoilt", "--output", str(output), "--version", "1"]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert "BAD ROWS: 5 rows" in err
    named = list(csv.DictReader((output / "bad_rows.csv").open()))
    places = {(Path(r["file"]).name, int(r["line"])): r["reason"] for r in named}
    assert places.keys() == {
        ("penguins.csv", 6),
        ("penguins.csv", 7),
        ("penguins.csv", 8),
        ("no_mass.csv", 2),
        ("no_mass.csv", 3),
    }
    assert "bill_length_mm: 'long' is not a number" in places[("penguins.csv", 6)]
    assert "2 fields where the header has" in places[("penguins.csv", 7)]
    assert "no column body_mass_g" in places[("no_mass.csv", 2)]
    assert f"{folder / 'penguins.csv'}:6: column bill_length_mm" in err
    # Every good row is still predicted.
    assert len(_logs(sorted(output.glob("prediction_logs-*.gz")))) == PENGUIN_ROWS


def test_the_node_compiles_for_kubeflow_and_airflow(run, tmp_path):
    paths, _ = run
    sets = [a for o in INFERENCE for a in ("--set", o)]
    job_file = tmp_path / "penguin.json"
    argv = ["compile", "penguin", "--env", "kubeflow", "--output", str(job_file), *sets]
    assert cli.main(argv) == 0
    job = json.loads(job_file.read_text())
    tasks = job_tasks(job["pipelineSpec"])
    assert {"bulk_inferrer", "bulk_inferrer_table"} <= set(tasks)
    assert set(tasks["bulk_inferrer"]["dependentTasks"]) >= {"trainer", "evaluator"}
    assert "bulk_inferrer" in tasks["bulk_inferrer_table"]["dependentTasks"]
    executors = json.dumps(job["pipelineSpec"]["deploymentSpec"])
    assert "tfx.components.bulk_inferrer.executor.Executor" in executors

    dags = tmp_path / "dags"
    argv = ["compile", "penguin", "--env", "airflow", "--workdir", str(paths.workdir)]
    assert cli.main([*argv, "--output", str(dags / "penguin_dag.py"), *sets]) == 0
    probe = (
        "import json, sys\nfrom airflow.models import DagBag\n"
        "bag = DagBag(sys.argv[1], include_examples=False)\n"
        "print('REPORT ' + json.dumps({'errors': {k: str(v) for k, v in "
        "bag.import_errors.items()}, 'upstream': {t.task_id: sorted(t.upstream_task_ids) "
        "for d in bag.dags.values() for t in d.tasks}}))\n"
    )
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(tmp_path),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{tmp_path / 'airflow.db'}",
        "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "600",
    }
    done = subprocess.run(
        [sys.executable, "-c", probe, str(dags)], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("REPORT "))
    report = json.loads(line[len("REPORT ") :])
    assert report["errors"] == {}
    assert "evaluator" in report["upstream"]["bulk_inferrer"]
    assert report["upstream"]["bulk_inferrer_table"] == ["bulk_inferrer"]
