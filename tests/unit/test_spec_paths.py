"""Paths and names a spec, a profile or the command line gives stay where they are promised to:
data and metadata inside the workdir, the curated schema inside the project, a profile inside
configs/, a report inside the run folders."""

import pytest

from pipelines import cli
from pipelines.spec.loading import SpecError, load_spec

INSIDE_WORKDIR = ["data.input_dir", "data.serving_data_dir", "runtime.metadata.path"]
ABSOLUTE = "must be relative to the {}, not absolute: the spec's files stay in it"
CLIMBS = "a '..' component is not allowed: the path would climb out of its folder"
TRAVERSALS = [
    # key, value, why
    *[(key, "/etc", ABSOLUTE.format("workdir")) for key in INSIDE_WORKDIR],
    *[(key, "../elsewhere", CLIMBS) for key in INSIDE_WORKDIR],
    ("data.input_dir", "data/../../etc", CLIMBS),
    ("data.input_dir", "..\\etc", CLIMBS),
    ("data.prepare.filename", "/tmp/taxi.csv", ABSOLUTE.format("workdir")),
    ("data.prepare.filename", "../../taxi.csv", CLIMBS),
    ("schema.path", "/etc/schema.pbtxt", ABSOLUTE.format("project root")),
    ("schema.path", "schemas/../../schema.pbtxt", CLIMBS),
    ("push.base_dir", "../serving", CLIMBS),
    ("push.base_dir", "/srv/models/../../etc", CLIMBS),
]


@pytest.mark.parametrize(("key", "value", "why"), TRAVERSALS)
def test_a_path_that_leaves_its_folder_is_refused_naming_the_key(key, value, why):
    override = f"{key}={value}"
    with pytest.raises(SpecError) as raised:
        load_spec("taxi", overrides=[override])
    assert str(raised.value) == f"--set {override}: {key}: {why} (got {value!r})."


URI_KEYS = ["data.input_dir", "data.serving_data_dir", "push.base_dir"]


@pytest.mark.parametrize("key", URI_KEYS)
@pytest.mark.parametrize("value", ["gs://team-bucket/taxi", "s3://team.bucket/taxi/"])
def test_a_bucket_is_accepted_where_input_or_serving_may_live(key, value):
    spec = load_spec("taxi", overrides=[f"{key}={value}"]).spec
    section, name = key.split(".")
    assert getattr(getattr(spec, section), name) == value


@pytest.mark.parametrize("key", URI_KEYS)
@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("hdfs://nn/taxi", "names the scheme hdfs://, which Conveyor does not read or write"),
        ("gs:/bucket/taxi", "needs two slashes after 'gs:'"),
        ("s3://Bucket_Upper/taxi", "is not a valid bucket name"),
        ("GS://bucket/taxi", "write the scheme in lower case"),
        ("gs:///taxi", "names no bucket"),
    ],
)
def test_a_malformed_uri_or_another_scheme_is_refused_naming_the_key(key, value, words):
    # Read as a path it would be `<workdir>/gs:/bucket/taxi`, a folder that does not exist.
    with pytest.raises(SpecError) as raised:
        load_spec("taxi", overrides=[f"{key}={value}"])
    message = str(raised.value)
    assert message.startswith(f"--set {key}={value}: {key}: {value!r}")
    assert words in message and "docs/storage.md" in message and "\n" not in message


@pytest.mark.parametrize("key", ["runtime.metadata.path", "data.prepare.filename"])
def test_a_uri_is_refused_where_a_path_stays_inside_the_workdir(key):
    with pytest.raises(SpecError) as raised:
        load_spec("taxi", overrides=[f"{key}=gs://bucket/x"])
    assert f"{key}: a URI (gs://), not a path relative to the workdir" in str(raised.value)


def test_paths_that_stay_inside_are_accepted(tmp_path):
    spec = load_spec(
        "taxi",
        overrides=[
            "data.input_dir=data/taxi/nightly",
            "data.serving_data_dir=./serving_log",
            "runtime.metadata.path=metadata/store.sqlite",
            "data.prepare.filename=taxi..v2.csv",  # `..` inside a name climbs nowhere
            # A team may serve from a shared folder outside the workdir, on purpose.
            "push.base_dir=/srv/models",
        ],
    ).spec
    assert spec.push.base_dir == "/srv/models"
    assert spec.data.prepare.filename == "taxi..v2.csv"


@pytest.mark.parametrize("env", ["../configs/ci", "/etc/passwd", "ci/../local", "..", ""])
def test_env_is_a_profile_name_not_a_path(env):
    with pytest.raises(SpecError, match=r"expected the name of a profile in configs/, not a path"):
        load_spec("taxi", env=env)


@pytest.mark.parametrize("run_id", ["../../etc", "penguin/../x", "/etc/passwd", "*", "pen?uin"])
def test_report_refuses_a_run_id_that_is_a_path_or_a_pattern(run_id, tmp_path, capsys):
    # A report another folder would otherwise answer with.
    (tmp_path / "runs" / "penguin" / "x").mkdir(parents=True)
    (tmp_path / "runs" / "penguin" / "x" / "report.html").write_text("<html></html>")
    assert cli.main(["report", run_id, "--workdir", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"error: {run_id!r} is not a run id" in captured.err
