"""Where everything lives: Conveyor's installed files, the project's files, and one pipeline's
files under a workdir.

Every path rule of Conveyor is here, so the builder, the runners, the nightly loop, the report
and the command line agree on them by construction. This module imports nothing heavy and
nothing of Conveyor's above `pipelines.core`: every layer may use it. The project (specs,
profile layers, schemas, the team's modules) is found at call time by `pipelines.core.project`,
never at import.

A working directory holds, per pipeline `NAME`:

    <workdir>/<data.input_dir>/                 the input CSVs (or dated span folders)
    <workdir>/pipeline_root/NAME/               TFX's component outputs
    <workdir>/<runtime.metadata.path>           the SQLite ML Metadata store
    <workdir>/<push.base_dir>/<push.model_name>/  TF Serving's model base path (versions)
    <workdir>/runs/NAME/<run id>/               per run: resolved spec, run.log, summary, report
    <workdir>/runs/NAME/latest_outcome.json     the last final outcome (unspanned pipelines)
    <workdir>/runs/NAME/nights/span-<n>.json    the last final outcome of each span
    <workdir>/runs/NAME/cron.log                what the crontab entry's runs print
    <workdir>/runs/NAME/.lock, .lock.owner      the one run at a time, and who it is (in a
                                                bucket: one object, held by a lease)
    <workdir>/compiled/{kubeflow,airflow}/      what `conveyor compile` writes
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pipelines.core import storage
from pipelines.core.object_path import AnyPath, ObjectPath, as_path, under
from pipelines.core.project import ProjectNotFound, find_project

# Where Conveyor's packages are installed (the parent of pipelines/ and components/): the source
# checkout when it runs from source or installed editable, site-packages from a wheel. A team's
# project is elsewhere, found when a command needs it (pipelines.core.project).
FRAMEWORK_ROOT = Path(__file__).resolve().parents[2]
# Conveyor's default profiles, package data that a project's configs/ENV.yaml layers over.
FRAMEWORK_PROFILES_DIR = FRAMEWORK_ROOT / "pipelines" / "profiles"
# Conveyor's own lock, present only in its source checkout.
FRAMEWORK_LOCK = FRAMEWORK_ROOT / "requirements.lock"
# Conveyor's code, whose digest is its version when it runs from source.
CODE_PACKAGES = ("pipelines", "components")
DISTRIBUTION = "conveyor"

if TYPE_CHECKING:  # the spec models import this module's constants for nothing at run time
    from pipelines.spec.models import PipelineSpec


RUNS_DIR = "runs"
RUN_LOG = "run.log"
RUN_SUMMARY = "summary.json"
RESOLVED_SPEC = "resolved_spec.yaml"
REPORT_FILE = "report.html"
LATEST_OUTCOME = "latest_outcome.json"
NIGHTS_DIR = "nights"
CRON_LOG = "cron.log"
RUN_LOCK = ".lock"  # and locally RUN_LOCK + ".owner": who holds it
DEFAULT_WORKDIR = ".conveyor"


def default_workdir(explicit: str | os.PathLike | None = None) -> AnyPath:
    """The working directory a command uses: `explicit`, else $CONVEYOR_WORKDIR, else
    ./.conveyor; always absolute. A gs:// or s3:// URI makes it a folder in a bucket
    (docs/storage.md)."""
    chosen = explicit or os.environ.get("CONVEYOR_WORKDIR") or DEFAULT_WORKDIR
    return as_path(chosen).resolve()


# Where the state that cannot live in a bucket is kept when the workdir is one: the SQLite
# metadata file (SQLite needs a local disk), the crontab's log and the run's log as it is
# written. A bucket shared by several machines needs the MySQL metadata store instead.
STATE_DIR_VARIABLE = "CONVEYOR_STATE_DIR"


def local_state_dir(workdir: AnyPath) -> Path:
    """The workdir itself when it is local; for a workdir in a bucket, a local folder named
    after it: `$CONVEYOR_STATE_DIR/<scheme>/<bucket>/<key>` (default
    `~/.cache/conveyor/state/...`)."""
    if not isinstance(workdir, ObjectPath):
        return Path(workdir)
    root = os.environ.get(STATE_DIR_VARIABLE) or os.path.join(
        os.path.expanduser("~"), ".cache", "conveyor", "state"
    )
    return Path(root, workdir.scheme, workdir.bucket, *workdir.key.split("/"))


def project_file(relative: str | os.PathLike) -> Path:
    """A path the spec gives relative to the project (a curated schema, say), made absolute
    against the project found now (see `pipelines.core.project.find_project`)."""
    return find_project().file(relative)


def relative_to_project(path: str | os.PathLike) -> str:
    """`path` written relative to the project when it lies inside it, else relative to
    Conveyor's installed packages when it is one of theirs (a default profile), else as given:
    for messages, so it never fails for want of a project."""
    try:
        return find_project().relative(path)
    except ProjectNotFound:
        return framework_relative(path)


def framework_relative(path: str | os.PathLike) -> str:
    """`path` relative to Conveyor's installed packages when it lies inside them (for messages:
    `pipelines/profiles/ci.yaml` wherever Conveyor is installed), else as given."""
    try:
        return str(Path(path).resolve().relative_to(FRAMEWORK_ROOT))
    except ValueError:
        return str(path)


def source_digest(folders: Iterable[str], suffixes: tuple[str, ...]) -> str:
    """SHA-256 over the paths and bytes of Conveyor's source files under `folders` (relative to
    FRAMEWORK_ROOT), tests and caches left out."""
    digest = hashlib.sha256()
    for folder in folders:
        for path in sorted((FRAMEWORK_ROOT / folder).rglob("*")):
            if path.suffix in suffixes and not {"tests", "__pycache__"} & set(path.parts):
                digest.update(str(path.relative_to(FRAMEWORK_ROOT)).encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()


def installed_version() -> str | None:
    """Conveyor's version when it runs from an installed distribution (a wheel), None when it
    runs from its source checkout (on the path, or installed editable: the files are the
    checkout's, which a version number does not pin). A checkout is known by its pyproject.toml
    beside the packages; site-packages has none."""
    from importlib import metadata

    if (FRAMEWORK_ROOT / "pyproject.toml").is_file():
        return None
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None


def framework_version(folders: Iterable[str] = CODE_PACKAGES) -> str:
    """What identifies the Conveyor code a run uses: `conveyor==<version>` when installed from a
    wheel, else `source:<digest>` of its `.py` files under `folders`. The run's fingerprint and
    the code version of cached nodes both use it."""
    version = installed_version()
    if version is not None:
        return f"{DISTRIBUTION}=={version}"
    return "source:" + source_digest(folders, (".py",))


@dataclass(frozen=True)
class RunPaths:
    """Absolute locations of one pipeline's inputs and outputs under a working directory."""

    workdir: AnyPath
    spec: PipelineSpec

    def __post_init__(self) -> None:
        object.__setattr__(self, "workdir", as_path(self.workdir))

    @property
    def remote(self) -> bool:
        """Whether the workdir is a folder in a bucket."""
        return isinstance(self.workdir, ObjectPath)

    @property
    def uses_object_storage(self) -> bool:
        """Whether anything this pipeline reads or writes is in a bucket."""
        folders = (self.workdir, self.input_dir, self.serving_config_dir, self.serving_data_dir)
        return any(isinstance(folder, ObjectPath) for folder in folders)

    def buckets(self) -> set[str]:
        """`scheme://bucket` of every bucket this pipeline reads or writes."""
        folders = (self.workdir, self.input_dir, self.serving_config_dir, self.serving_data_dir)
        return {
            f"{folder.scheme}://{folder.bucket}"
            for folder in folders
            if isinstance(folder, ObjectPath)
        }

    def configure_storage(self) -> None:
        """Sets, in this process's environment (inherited by every process it starts, Beam's
        workers included), how TensorFlow, Beam and the stores' clients reach the buckets, as
        the profile's `runtime.storage` says (`storage.configure`). Nothing is set when every
        path is local and the profile names no store: a local run stays exactly as it was."""
        settings = self.spec.runtime.storage
        if self.uses_object_storage or settings.gcs.endpoint or settings.s3.endpoint:
            storage.configure(settings)

    @property
    def input_dir(self) -> AnyPath:
        """Where the input CSVs (or dated span folders) are: `<workdir>/<data.input_dir>`, or
        the URI `data.input_dir` names."""
        return under(self.workdir, self.spec.data.input_dir)

    @property
    def pipeline_root(self) -> AnyPath:
        """TFX's pipeline root, where every component writes its outputs."""
        return self.workdir / "pipeline_root" / self.spec.name

    @property
    def serving_dir(self) -> AnyPath:
        """TF Serving's model base path: versions appear as `<serving_dir>/<n>/`."""
        return self.serving_config_dir / self.spec.push.model_name

    @property
    def serving_config_dir(self) -> AnyPath:
        """The push base_dir, which holds `serving_dir` and TF Serving's config files beside
        it: `models.config`, `monitoring.config` and (with `push.batching`) `batching.config`.
        Under the workdir, or the URI `push.base_dir` names."""
        return under(self.workdir, self.spec.push.base_dir)

    @property
    def serving_data_dir(self) -> AnyPath | None:
        """Where the serving logs used for skew are (None: the spec measures no skew)."""
        folder = self.spec.data.serving_data_dir
        return under(self.workdir, folder) if folder else None

    @property
    def request_log_dir(self) -> AnyPath | None:
        """Where the model server writes its request log, one folder a model under it (None:
        the spec logs no requests)."""
        logged = self.spec.push.request_log
        return under(self.workdir, logged.dir) if logged else None

    @property
    def state_dir(self) -> Path:
        """The local folder of what cannot live in a bucket (`local_state_dir`)."""
        return local_state_dir(self.workdir)

    @property
    def metadata_path(self) -> Path:
        """The SQLite ML Metadata store (`runtime.metadata.path`); unused with a MySQL store.
        Always on a local disk: under the local state folder when the workdir is a bucket."""
        return self.state_dir / self.spec.runtime.metadata.path

    @property
    def runs_dir(self) -> AnyPath:
        """This pipeline's folder of run folders and outcome records, under `runs_root`."""
        return runs_root(self.workdir) / self.spec.name

    def run_dir(self, run_id: str) -> AnyPath:
        """One run's folder: its resolved spec, run.log, summary and report."""
        return self.runs_dir / run_id

    def run_log(self, run_id: str) -> Path:
        """The run's log as it is written, line by line: in its folder, or, when the workdir is
        a bucket (an object cannot be appended to), in the local state folder, from where the
        run's end publishes it into its folder (`pipelines.finish.run_folder`)."""
        if not self.remote:
            return Path(self.run_dir(run_id)) / RUN_LOG
        return runs_root(self.state_dir) / self.spec.name / run_id / RUN_LOG

    def outcome_record(self, span: int | None) -> AnyPath:
        """Where the last final outcome is recorded: per span, or one for unspanned data."""
        if span is None:
            return self.runs_dir / LATEST_OUTCOME
        return self.runs_dir / NIGHTS_DIR / f"span-{span}.json"

    @property
    def cron_log(self) -> Path:
        """The file the crontab entry appends its runs' output to (local: cron appends)."""
        return runs_root(self.state_dir) / self.spec.name / CRON_LOG

    @property
    def lock_file(self) -> Path:
        """Held by the one run (or backfill) of this pipeline under this workdir at a time, when
        the workdir is local (a local file; see `lock_object` for a workdir in a bucket)."""
        return runs_root(self.state_dir) / self.spec.name / RUN_LOCK

    @property
    def lock_object(self) -> AnyPath:
        """The lock of one run at a time when the workdir is a bucket: an object beside the
        run folders, `<workdir>/runs/<pipeline>/.lock`, shared by every machine that runs the
        pipeline there (`pipelines.core.lease_lock`)."""
        return self.runs_dir / RUN_LOCK

    def compiled_output(self, target: str) -> Path:
        """The default file `conveyor compile` writes for `target` (kubeflow or airflow)."""
        folder = self.state_dir / "compiled" / target
        if target == "kubeflow":
            return folder / f"{self.spec.name}.json"
        return folder / f"{self.spec.name}_dag.py"


def runs_root(workdir: AnyPath) -> AnyPath:
    """`<workdir>/runs`: one folder per pipeline, one per run inside it."""
    return as_path(workdir) / RUNS_DIR


def find_run_dirs(workdir: AnyPath, run_id: str) -> list[AnyPath]:
    """Every `<workdir>/runs/<pipeline>/<run_id>` folder (a run id names one pipeline's run)."""
    return sorted(runs_root(workdir).glob(f"*/{run_id}"))


def recent_run_dirs(workdir: AnyPath, limit: int = 5) -> list[AnyPath]:
    """The newest run folders under `<workdir>/runs/`, newest first."""
    run_dirs = [p for p in runs_root(workdir).glob("*/*") if p.is_dir() and "-" in p.name]
    # Run ids end in a sortable UTC stamp: `<pipeline>-<YYYYmmddTHHMMSS.ffffffZ>`.
    run_dirs.sort(key=lambda p: p.name.rsplit("-", 1)[-1], reverse=True)
    return run_dirs[:limit]
