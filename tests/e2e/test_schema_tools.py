"""One real penguin run, then what is read from it: the run report, `conveyor report`, and
`conveyor schema diff` / `accept` against copies of the curated schema (the real
`schemas/penguin/schema.pbtxt` is never written: every schema command here gets
`--set schema.path=<a copy>`)."""

import hashlib
import re
import shutil

import pytest

from pipelines import cli
from pipelines.core.paths import RunPaths
from pipelines.core.project import find_project
from pipelines.ops import nightly
from pipelines.spec.loading import load_spec

pytestmark = pytest.mark.e2e

PROJECT = find_project().root
CURATED = PROJECT / "schemas" / "penguin" / "schema.pbtxt"


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def penguin_run(tmp_path_factory):
    curated_before = _digest(CURATED)
    workdir = tmp_path_factory.mktemp("schema-tools")
    assert cli.main(["data", "penguin", "--workdir", str(workdir)]) == 0
    loaded = load_spec("penguin", env="ci", workdir=workdir)
    progress: list[str] = []
    result = nightly.run(loaded, workdir, echo=progress.append)
    yield RunPaths(workdir=workdir, spec=loaded.spec), result, progress
    assert _digest(CURATED) == curated_before, "a test wrote the real curated schema"


# `schema.path` is relative to the project (the pipeline image copies the project), so the
# copies live in an ignored folder inside it, one per test, removed afterwards.
SCRATCH = PROJECT / ".pytest-schemas"


@pytest.fixture
def scratch(tmp_path):
    folder = SCRATCH / tmp_path.name
    folder.mkdir(parents=True, exist_ok=True)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _schema_copy(folder, *, drop_feature=None, drop_value=None):
    """The curated schema copied into `folder`, optionally without a column or a domain value."""
    text = CURATED.read_text()
    if drop_feature:
        start = text.index(f'feature {{\n  name: "{drop_feature}"')
        end = text.index("\n}\n", start) + 3
        text = text[:start] + text[end:]
    if drop_value:
        text = text.replace(f'  value: "{drop_value}"\n', "", 1)
    copy = folder / "schema.pbtxt"
    copy.write_text(text)
    return copy


def _schema_cli(action, paths, schema, capsys):
    argv = ["schema", action, "penguin", "--env", "ci", "--workdir", str(paths.workdir)]
    code = cli.main(argv + ["--set", f"schema.path={schema.relative_to(PROJECT)}"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_run_writes_a_self_contained_report(penguin_run):
    paths, result, progress = penguin_run
    assert result.outcome == "pushed", result.message
    report = paths.runs_dir / result.run_id / "report.html"
    assert f"report: {report}" in progress
    page = report.read_text()
    assert "<script" not in page and "http://" not in page and "https://" not in page
    # The statistics of both splits, with the real columns and numbers.
    assert re.search(r"Split train: \d+ examples", page)
    assert re.search(r"Split eval: \d+ examples", page)
    for column in ("bill_length_mm", "body_mass_g", "island", "sex", "species"):
        assert f"<td>{column}</td>" in page
    assert "Biscoe (" in page  # the top values of a string column
    # The evaluation the spec gates on, on the whole set and by island, with its threshold.
    assert "SparseCategoricalAccuracy (sparse_categorical_accuracy)" in page
    assert "<td>all examples</td>" in page and "<td>island = Dream</td>" in page
    assert "&gt;= 0.8" in page
    assert "thresholds met" in page
    # The gate decisions and the push.
    assert "blessed</span> with no baseline" in page
    assert "pushed version 1" in page
    assert str(paths.serving_dir / "1") in page


def test_conveyor_report_prints_the_path(penguin_run, capsys):
    paths, result, _ = penguin_run
    assert cli.main(["report", result.run_id, "--workdir", str(paths.workdir)]) == 0
    assert capsys.readouterr().out.strip() == str(paths.runs_dir / result.run_id / "report.html")


def test_conveyor_report_lists_recent_runs_for_an_unknown_id(penguin_run, capsys):
    paths, result, _ = penguin_run
    assert cli.main(["report", "penguin-nope", "--workdir", str(paths.workdir)]) == 1
    err = capsys.readouterr().err
    assert "no run penguin-nope" in err
    assert result.run_id in err


def test_schema_diff_finds_nothing_when_the_data_matches(penguin_run, scratch, capsys):
    paths, result, _ = penguin_run
    code, out, _ = _schema_cli("diff", paths, _schema_copy(scratch), capsys)
    assert code == 0, out
    assert f"(run {result.run_id}," in out
    assert "no difference" in out


def test_schema_diff_names_a_column_and_a_value_the_schema_lacks(penguin_run, scratch, capsys):
    paths, _, _ = penguin_run
    schema = _schema_copy(scratch, drop_feature="year", drop_value="Torgersen")
    before = schema.read_text()
    code, out, _ = _schema_cli("diff", paths, schema, capsys)
    assert code == 3, out
    assert "year\n  anomaly: New column" in out
    assert "  accept would change: new column: " in out
    assert "island\n  anomaly: Unexpected string values" in out
    assert "accept would change: domain island: adds 'Torgersen'" in out
    assert "2 columns differ" in out
    assert schema.read_text() == before  # diff writes nothing


def test_schema_accept_writes_the_update_and_then_diff_is_clean(penguin_run, scratch, capsys):
    paths, _, _ = penguin_run
    schema = _schema_copy(scratch, drop_feature="year", drop_value="Torgersen")
    code, out, _ = _schema_cli("accept", paths, schema, capsys)
    assert code == 0, out
    assert f"updated {schema}" in out
    assert "  year: new column" in out
    assert "Review the change" in out
    text = schema.read_text()
    assert text.startswith(CURATED.read_text().splitlines()[0] + "\n")  # the header comment kept
    assert 'name: "year"' in text and 'value: "Torgersen"' in text

    code, out, _ = _schema_cli("diff", paths, schema, capsys)
    assert code == 0, out
    assert "no difference" in out
    code, out, _ = _schema_cli("accept", paths, schema, capsys)
    assert code == 0 and "nothing to accept" in out
