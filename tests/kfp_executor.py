"""A test-side executor for the PipelineJob `conveyor compile NAME --profile kubeflow` writes:
it runs the job's tasks on this machine, one at a time, as Kubeflow Pipelines v2 and Vertex AI
would run them, so that tests execute the compiled job itself rather than trusting it.

What it does as KFP does (backend/src/v2 of kubeflow/pipelines: driver/driver.go
`provisionOutputs`, driver/resolve.go, component/launcher_v2.go, metadata/client.go):
- walks the root DAG and the sub-DAGs it runs in dependency order; a task runs when every task
  it depends on succeeded (`ALL_UPSTREAM_TASKS_SUCCEEDED`), or once they are all done
  (`ALL_UPSTREAM_TASKS_COMPLETED`, the exit handler); a task whose trigger condition does not
  hold (the CEL TFX writes for `tfx.dsl.Cond`, `cel_holds`) is SKIPPED, as is every task after
  a skipped one, and a DAG whose tasks all succeeded or were skipped succeeds, as on Vertex AI;
  a DAG fails when one of its tasks fails;
- builds each container task's executor input: parameters from constants (KFP's run-time
  placeholders such as `{{$.pipeline_job_create_time_utc}}` substituted), from the parent
  DAG's inputs (the job's runtime parameters at the root), from upstream tasks' output
  parameters, and the final status of the task an exit handler waits on; the component's
  default values for the rest; upstream artifacts with their name (the record's id, as KFP
  gives an ML Metadata id), URI, metadata and the producer's type schema; output artifacts
  at `<pipeline_root>/<pipeline>/<run>/<task>/<uuid>/<output key>`, the output metadata file
  in that task root, the folders above each output created (`prepareOutputFolders`), never
  the output folders themselves; the driver's type check (any value is a STRING parameter's
  JSON text, other types must match, else the task fails before it starts); a schema 2.0.0
  job's typed `parameters` as Vertex AI gives them;
- runs the container's command and arguments, placeholders resolved (`{{$}}` is the executor
  input as JSON), in a subprocess of this virtualenv (`python` is this interpreter), with the
  image's environment as the caller gives it (with `warm=True`, a `python -m` command runs in
  a child forked from an interpreter that imported TensorFlow, TFX and Beam once:
  tests/warm_python.py); reads back the executor output (artifacts'
  URIs and metadata, output parameters) and records the output artifacts.

What only Vertex AI runs, and this executor does too (open-source KFP refuses or skips it:
its Argo compiler has "resolver executors not implemented", and it ignores container
lifecycle hooks):
- resolver tasks: each `outputArtifactQueries` filter (`schema_title="tfx.Model" AND
  state=LIVE AND metadata.blessed.number_value=1`, `name="{{$.inputs.artifacts[...]...}}"`)
  is answered from the artifact record, newest first;
- the `preCacheCheck` lifecycle hook (FileBasedExampleGen's driver, which finds the span and
  writes the output metadata file the executor then reads), run before the container; as
  Vertex AI does, the metadata the hook gives an output artifact (the span) is the artifact's
  metadata in the container's executor input, so the Examples carry their span;
- the final status an exit handler gets: Vertex AI's states (`SUCCEEDED`, `FAILED`) and an
  error naming the failed tasks; `platform="kfp"` gives open-source KFP's instead (the DAG's
  ML Metadata state, `COMPLETE` or `FAILED`, and an empty error).
Importer tasks are answered from the record too (`reimport: false` reuses an artifact of the
same URI and type).

The artifact record is a JSON file (`ArtifactRecord`): every artifact earlier runs produced or
imported, with what resolvers query (id, schema title, URI, metadata, state); a second run
through the same record resolves what the first produced, as KFP's ML Metadata would.

Paths: `mounts` maps a path prefix inside the container to a local folder, as Vertex AI mounts
`gs://BUCKET` at `/gcs/BUCKET`: it is applied to every string parameter and to `gs://` URIs
(the pipeline root), so the job runs unchanged with `pipeline_root` in a local folder.

What it leaves out: ML Metadata (no executions, contexts or lineage; only the record),
caching (every task runs), retries, parallel tasks, loops, pod specs (resources,
accelerators, node selectors are not enforced), container images (tasks run in this
virtualenv), KFP's log artifacts (each task's output goes to `executor.log` in its task root),
and the upload of outputs written to a local path, which TFX's tasks never use (they write to
the artifact's URI).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from tests.warm_python import WarmPython

SUCCEEDED, FAILED, NOT_TRIGGERED = "SUCCEEDED", "FAILED", "NOT_TRIGGERED"
SKIPPED = "SKIPPED"  # a trigger condition that did not hold, or a skipped upstream task
COMPLETED_POLICY = "ALL_UPSTREAM_TASKS_COMPLETED"
_PYTHON_TYPES = {
    "NUMBER_INTEGER": (int, float),
    "NUMBER_DOUBLE": (int, float),
    "BOOLEAN": bool,
    "LIST": list,
    "STRUCT": dict,
    "TASK_FINAL_STATUS": dict,
}
LEGACY_SCHEMA = "2.0.0"  # typed `parameters` in the executor input, not `parameterValues`
_INPUT_ARTIFACT_PLACEHOLDER = re.compile(
    r"\{\{\$\.inputs\.artifacts\['([^']+)'\]\.(uri|metadata\['([^']+)'\])\}\}"
)
_INPUT_PARAMETER_PLACEHOLDER = re.compile(r"\{\{\$\.inputs\.parameters\['([^']+)'\]\}\}")
_OUTPUT_PLACEHOLDER = re.compile(
    r"\{\{\$\.outputs\.(artifacts\['([^']+)'\]\.uri|parameters\['([^']+)'\]\.output_file"
    r"|output_file)\}\}"
)
_FILTER_CLAUSE = re.compile(
    r'^(schema_title|name)="(?P<text>[^"]*)"$'
    r"|^state=(?P<state>[A-Z]+)$"
    r"|^metadata\.(?P<key>[\w-]+)\.(?P<kind>number_value|string_value)=(?P<value>.+)$"
)


class ArtifactRecord:
    """The artifacts runs through this executor produced or imported, in one JSON file: what
    KFP's ML Metadata holds, reduced to what resolver and importer tasks read."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.artifacts: list[dict[str, Any]] = (
            json.loads(self.path.read_text()) if self.path.exists() else []
        )

    def add(self, title: str, uri: str, metadata: dict, run_id: str, task: str) -> dict:
        """Records one artifact, LIVE, and returns it with its id (`name`, as KFP names an
        artifact by its ML Metadata id)."""
        entry = {
            "name": str(len(self.artifacts) + 1),
            "schema_title": title,
            "uri": uri,
            "metadata": metadata,
            "state": "LIVE",
            "run": run_id,
            "task": task,
        }
        self.artifacts.append(entry)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.artifacts, indent=1))
        return entry

    def query(self, filter_text: str) -> list[dict]:
        """The artifacts a resolver's filter selects, newest first.

        Raises:
          ValueError: a clause this record cannot answer (the filter is not one TFX compiles).
        """
        tests = [_clause_test(c.strip()) for c in filter_text.split(" AND ")]
        return [a for a in reversed(self.artifacts) if all(test(a) for test in tests)]


def _clause_test(clause: str):
    match = _FILTER_CLAUSE.match(clause)
    if match is None:
        raise ValueError(f"resolver filter clause {clause!r}: not one this executor answers")
    if match["text"] is not None:
        field, text = clause.split("=", 1)[0], match["text"]
        return lambda a: a[field] == text
    if match["state"] is not None:
        return lambda a: a["state"] == match["state"]
    key, value = match["key"], match["value"]
    if match["kind"] == "number_value":
        return lambda a: (
            isinstance(a["metadata"].get(key), (int, float))
            and float(a["metadata"][key]) == float(value)
        )
    return lambda a: a["metadata"].get(key) == value.strip('"')


def type_title(artifact_type: Mapping[str, Any]) -> str:
    """The schema title of a compiled artifact type (`schemaTitle`, or the `title` of its
    `instanceSchema` YAML, as TFX compiles them)."""
    if "schemaTitle" in artifact_type:
        return artifact_type["schemaTitle"]
    return yaml.safe_load(artifact_type["instanceSchema"]).get("title", "tfx.Artifact")


@dataclasses.dataclass
class TaskRun:
    """One task of the run: its state, its executor input, what it produced, its log."""

    name: str
    kind: str  # container, resolver, importer or dag
    state: str = NOT_TRIGGERED
    seconds: float = 0.0
    executor_input: dict[str, Any] | None = None
    artifacts: dict[str, list[dict[str, Any]]] = dataclasses.field(default_factory=dict)
    parameters: dict[str, Any] = dataclasses.field(default_factory=dict)
    log: Path | None = None
    error: str = ""
    # A `preCacheCheck` hook's output file (FileBasedExampleGen's driver: the span it chose,
    # the input config with that span's pattern).
    driver_output: dict[str, Any] | None = None


@dataclasses.dataclass
class JobRun:
    """A whole run: its id, the root DAG's state, every task by name, its pipeline root."""

    run_id: str
    state: str
    tasks: dict[str, TaskRun]
    root: Path
    final_status: dict[str, Any] | None = None

    def failed(self) -> list[str]:
        return [t.name for t in self.tasks.values() if t.kind != "dag" and t.state == FAILED]


class JobExecutor:
    """Runs one compiled PipelineJob (see the module docstring).

    Args:
      job: the PipelineJob, as `conveyor compile` writes it.
      record: the artifact record resolvers and importers read.
      mounts: container path prefix -> local folder (`{"/gcs/": tmp / "gcs"}`).
      env: the image's environment (the subprocesses get exactly this, plus PATH).
      cwd: the image's working directory.
      platform: "vertex" (the default: resolver tasks run only there) or "kfp", which sets the
        final status an exit handler gets.
      task_timeout: seconds a task may run.
      warm: run each `python -m` command in a child of a warm interpreter
        (tests/warm_python.py) instead of a fresh one: the same command without the 12 to
        16 s of imports each task's pod spends; `close()` ends it.
      fresh_once: with `warm`, still start a fresh interpreter, as a pod does, the first time
        each entry module (`python -m MODULE`) runs, so every entry point is shown to work on
        its own; a warm child differs from it only in the libraries imported before it.
    """

    def __init__(
        self,
        job: dict[str, Any],
        record: ArtifactRecord,
        mounts: Mapping[str, Path] | None = None,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        platform: str = "vertex",
        task_timeout: float = 900,
        warm: bool = False,
        fresh_once: bool = False,
    ):
        self.job = job
        self.spec = job["pipelineSpec"]
        self.record = record
        self.mounts = {prefix: str(folder) for prefix, folder in (mounts or {}).items()}
        self.env = dict(env if env is not None else os.environ)
        self.cwd = cwd
        self.platform = platform
        self.task_timeout = task_timeout
        self.final_status: dict[str, Any] | None = None
        self.warm = WarmPython(self.env, cwd) if warm else None
        self.fresh_once = fresh_once
        self.started_fresh: set[str] = set()  # the entry modules a fresh interpreter ran

    def _may_run_warm(self, argv: list[str]) -> bool:
        """False the first time a `fresh_once` executor meets an entry module (recording it)."""
        if not self.fresh_once or argv[1:2] != ["-m"] or argv[2] in self.started_fresh:
            return True
        self.started_fresh.add(argv[2])
        return False

    def close(self) -> None:
        """Ends the warm interpreter, if any."""
        if self.warm is not None:
            self.warm.close()

    # --- paths ---------------------------------------------------------------------------

    def local(self, text: str) -> str:
        """`text` with every mounted container path (and `gs://BUCKET/...` where `/gcs/` is
        mounted) replaced by its local folder."""
        if text.startswith("gs://") and "/gcs/" in self.mounts:
            text = "/gcs/" + text[len("gs://") :]
        for prefix, folder in self.mounts.items():
            text = re.sub(r"(?<![\w./-])" + re.escape(prefix), folder.rstrip("/") + "/", text)
        return text

    def _local_value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.local(value)
        if isinstance(value, list):
            return [self._local_value(v) for v in value]
        if isinstance(value, dict):
            return {k: self._local_value(v) for k, v in value.items()}
        return value

    # --- the run -------------------------------------------------------------------------

    def run(self, run_id: str | None = None, scheduled_at: str = "") -> JobRun:
        """Runs every task of the job; returns what happened (it never raises for a failed
        task: the run's state says it). `scheduled_at` is the time a recurring run fired
        (RFC 3339), KFP's `{{$.pipeline_job_schedule_time_utc}}`; "" for a run started by
        hand."""
        created = datetime.datetime.now(datetime.timezone.utc)
        name = self.spec["pipelineInfo"]["name"]
        self.run_id = run_id or f"{name}-{created.strftime('%Y%m%d%H%M%S')}"
        self.placeholders = {
            "{{$.pipeline_job_name}}": self.run_id,
            "{{$.pipeline_job_resource_name}}": self._resource_name(),
            "{{$.pipeline_job_uuid}}": self.run_id,
            "{{$.pipeline_job_create_time_utc}}": created.isoformat().replace("+00:00", "Z"),
            "{{$.pipeline_job_schedule_time_utc}}": scheduled_at,
        }
        runtime = self.job.get("runtimeConfig", {})
        root = self.local(runtime["gcsOutputDirectory"]).rstrip("/")
        self.run_root = f"{root}/{name}/{self.run_id}"
        self.tasks: dict[str, TaskRun] = {}
        inputs = {
            key: definition["defaultValue"]
            for key, definition in self.spec["root"]
            .get("inputDefinitions", {})
            .get("parameters", {})
            .items()
            if "defaultValue" in definition
        }
        inputs.update(runtime.get("parameterValues", {}))
        state = self._run_dag(self.spec["root"]["dag"], inputs)
        return JobRun(self.run_id, state, self.tasks, Path(self.run_root), self.final_status)

    def _resource_name(self) -> str:
        if self.platform == "vertex":
            return f"projects/conveyor-ci/locations/local/pipelineJobs/{self.run_id}"
        return self.run_id

    def _run_dag(self, dag: dict[str, Any], inputs: dict[str, Any]) -> str:
        tasks = dag["tasks"]
        states: dict[str, str] = {}
        for name in _topological(tasks):
            task = tasks[name]
            upstream = task.get("dependentTasks", [])
            policy = task.get("triggerPolicy", {})
            run_it = policy.get("strategy") == COMPLETED_POLICY or all(
                states[u] in (SUCCEEDED, SKIPPED) for u in upstream
            )
            component = self.spec["components"][task["componentRef"]["name"]]
            kind = "dag" if "dag" in component else self._executor_kind(component)
            self.tasks[name] = TaskRun(name, kind)
            skip = (
                run_it
                and policy.get("strategy") != COMPLETED_POLICY
                and (
                    any(states[u] == SKIPPED for u in upstream)
                    or ("condition" in policy and not self._holds(name, policy["condition"], task))
                )
            )
            if skip:
                states[name] = SKIPPED
            elif run_it:
                started = time.monotonic()
                states[name] = self._run_task(name, task, component, inputs, states)
                self.tasks[name].seconds = time.monotonic() - started
            else:
                states[name] = NOT_TRIGGERED
            self.tasks[name].state = states[name]
        return FAILED if any(s not in (SUCCEEDED, SKIPPED) for s in states.values()) else SUCCEEDED

    def _holds(self, name: str, condition: str, task: dict[str, Any]) -> bool:
        """Whether a task's trigger condition holds over its input artifacts (`cel_holds`)."""
        try:
            return cel_holds(condition, self._input_artifacts(task))
        except Exception as err:  # noqa: BLE001 - a condition KFP could not evaluate either
            raise NotImplementedError(f"task {name}: condition {condition!r}: {err}") from err

    def _executor_kind(self, component: dict[str, Any]) -> str:
        executor = self.spec["deploymentSpec"]["executors"][component["executorLabel"]]
        (kind,) = set(executor) & {"container", "resolver", "importer"}
        return kind

    def _run_task(self, name, task, component, dag_inputs, states) -> str:
        run = self.tasks[name]
        try:
            parameters = self._input_parameters(name, task, component, dag_inputs)
        except TypeError as err:  # KFP's driver fails the task before any container starts
            run.error = str(err)
            return FAILED
        artifacts = self._input_artifacts(task)
        if run.kind == "dag":
            return self._run_dag(component["dag"], parameters)
        executor = self.spec["deploymentSpec"]["executors"][component["executorLabel"]]
        if run.kind == "resolver":
            return self._resolve(run, executor["resolver"], component, artifacts)
        if run.kind == "importer":
            return self._import(run, executor["importer"], component, parameters)
        return self._run_container(run, executor["container"], component, parameters, artifacts)

    # --- inputs --------------------------------------------------------------------------

    def _input_parameters(self, name, task, component, dag_inputs) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for key, spec in task.get("inputs", {}).get("parameters", {}).items():
            if "runtimeValue" in spec:
                runtime_value = spec["runtimeValue"]
                if "constant" in runtime_value:
                    value = runtime_value["constant"]
                elif "constantValue" in runtime_value:  # schema 2.0: a typed Value
                    value = _from_legacy(runtime_value["constantValue"])
                else:
                    raise NotImplementedError(f"task {name}: parameter {key}: {runtime_value}")
                if isinstance(value, str):
                    value = self.placeholders.get(value, value)
            elif "componentInputParameter" in spec:
                value = dag_inputs[spec["componentInputParameter"]]
            elif "taskOutputParameter" in spec:
                producer = spec["taskOutputParameter"]
                value = self.tasks[producer["producerTask"]].parameters[
                    producer["outputParameterKey"]
                ]
            elif "taskFinalStatus" in spec:
                value = self._final_status(spec["taskFinalStatus"]["producerTask"])
            else:
                raise NotImplementedError(f"task {name}: parameter {key}: {spec}")
            values[key] = self._local_value(value)
        # The launcher's addDefaultParams: a component default for what the task leaves out.
        definitions = component.get("inputDefinitions", {}).get("parameters", {})
        for key, definition in definitions.items():
            if key not in values and "defaultValue" in definition:
                values[key] = definition["defaultValue"]
        # The driver's type check: any value is a STRING parameter's JSON text; other types
        # must match.
        for key, value in values.items():
            wanted = definitions.get(key, {}).get("parameterType")
            if wanted == "STRING" and not isinstance(value, str):
                values[key] = json.dumps(value, separators=(",", ":"))
            elif wanted in _PYTHON_TYPES and not isinstance(value, _PYTHON_TYPES[wanted]):
                raise TypeError(f"task {name}: input parameter {key!r} type mismatch: {wanted}")
        return values

    def _final_status(self, producer: str) -> dict[str, Any]:
        failed = [n for n, t in self.tasks.items() if t.kind != "dag" and t.state == FAILED]
        succeeded = self.tasks[producer].state == SUCCEEDED
        status: dict[str, Any] = {
            "pipelineJobResourceName": self._resource_name(),
            "pipelineTaskName": producer,
        }
        if self.platform == "kfp":  # the DAG execution's ML Metadata state, no error
            status.update(state="COMPLETE" if succeeded else "FAILED", error={})
        else:
            status["state"] = SUCCEEDED if succeeded else FAILED
            status["error"] = (
                {}
                if succeeded
                else {
                    "code": 9,
                    "message": "The DAG failed because some tasks failed. The failed tasks "
                    f"are: [{', '.join(failed)}].",
                }
            )
        self.final_status = status
        return status

    def _input_artifacts(self, task) -> dict[str, list[dict[str, Any]]]:
        result = {}
        for key, spec in task.get("inputs", {}).get("artifacts", {}).items():
            if "taskOutputArtifact" not in spec:
                raise NotImplementedError(f"input artifact {key}: {spec}")
            producer = spec["taskOutputArtifact"]
            result[key] = self.tasks[producer["producerTask"]].artifacts.get(
                producer["outputArtifactKey"], []
            )
        return result

    # --- resolvers and importers ---------------------------------------------------------

    def _resolve(self, run: TaskRun, resolver, component, artifacts) -> str:
        outputs = component.get("outputDefinitions", {}).get("artifacts", {})
        for key, query in resolver["outputArtifactQueries"].items():
            text = _INPUT_ARTIFACT_PLACEHOLDER.sub(
                lambda m: _input_artifact_value(artifacts, m), query["filter"]
            )
            found = self.record.query(text)[: int(query.get("limit", 1))]
            artifact_type = outputs[key]["artifactType"]
            run.artifacts[key] = [_runtime_artifact(a, artifact_type) for a in found]
        run.executor_input = {"filters": resolver["outputArtifactQueries"]}
        return SUCCEEDED

    def _import(self, run: TaskRun, importer, component, parameters) -> str:
        source = importer["artifactUri"]
        uri = source.get("constant") or parameters[source["runtimeParameter"]]
        uri = self.local(uri if isinstance(uri, str) else uri["stringValue"])
        (key,) = component["outputDefinitions"]["artifacts"]
        title = type_title(importer["typeSchema"])
        same = [
            a
            for a in self.record.artifacts
            if a["uri"] == uri and a["schema_title"] == title and not importer.get("reimport")
        ]
        found = same[-1] if same else None
        if found is None:
            metadata = importer.get("metadata", {})
            found = self.record.add(title, uri, metadata, self.run_id, run.name)
        run.artifacts[key] = [_runtime_artifact(found, importer["typeSchema"])]
        return SUCCEEDED

    # --- containers ----------------------------------------------------------------------

    def _run_container(self, run: TaskRun, container, component, parameters, artifacts) -> str:
        task_root = f"{self.run_root}/{run.name}/{uuid.uuid4().hex[:12]}"
        definitions = component.get("outputDefinitions", {})
        outputs: dict[str, Any] = {"artifacts": {}, "parameters": {}}
        for key, definition in definitions.get("artifacts", {}).items():
            artifact = {
                "name": key,
                "uri": f"{task_root}/{key}",
                "type": definition["artifactType"],
            }
            if definition.get("metadata"):
                artifact["metadata"] = definition["metadata"]
            outputs["artifacts"][key] = {"artifacts": [artifact]}
        for key in definitions.get("parameters", {}):
            outputs["parameters"][key] = {"outputFile": f"{task_root}/parameters/{key}"}
        outputs["outputFile"] = f"{task_root}/output_metadata.json"
        executor_input = {
            "inputs": {
                "parameterValues": parameters,
                "artifacts": {k: {"artifacts": v} for k, v in artifacts.items()},
            },
            "outputs": outputs,
        }
        if self.spec.get("schemaVersion") == LEGACY_SCHEMA:
            # A 2.0 job's tasks read the typed `parameters` (a struct as its JSON text).
            executor_input["inputs"]["parameters"] = {
                k: _to_legacy(v) for k, v in parameters.items()
            }
        run.executor_input = executor_input
        # prepareOutputFolders: the folder above each output, not the output itself.
        Path(task_root).mkdir(parents=True, exist_ok=True)
        for output in outputs["parameters"].values():
            Path(output["outputFile"]).parent.mkdir(parents=True, exist_ok=True)
        run.log = Path(task_root) / "executor.log"
        lifecycle = container.get("lifecycle", {}).get("preCacheCheck")
        commands = []
        if lifecycle:
            commands.append(lifecycle["command"] + lifecycle.get("args", []))
        commands.append(container["command"] + container.get("args", []))
        with run.log.open("a") as log:  # appended to: a warm interpreter's child writes too
            for step, command in enumerate(commands):
                if step and lifecycle:
                    self._apply_driver_output(run, executor_input)
                argv = [self._argument(a, executor_input) for a in command]
                argv = [sys.executable if a == "python" else a for a in argv[:1]] + argv[1:]
                log.write(f"$ {' '.join(argv[:4])} ...\n")
                log.flush()
                env = {"PATH": os.environ["PATH"], **self.env}
                try:
                    if self.warm is not None and self._may_run_warm(argv):
                        returncode = self.warm.run(argv, log, env, self.cwd, self.task_timeout)
                    else:
                        returncode = subprocess.run(
                            argv,
                            stdout=log,
                            stderr=subprocess.STDOUT,
                            env=env,
                            cwd=self.cwd,
                            timeout=self.task_timeout,
                            check=False,
                        ).returncode
                except subprocess.TimeoutExpired:
                    run.error = f"timed out after {self.task_timeout} s"
                    return FAILED
                if returncode != 0:
                    run.error = _tail(run.log)
                    return FAILED
        self._collect_outputs(run, executor_input, definitions)
        return SUCCEEDED

    def _apply_driver_output(self, run: TaskRun, executor_input: dict[str, Any]) -> None:
        """What Vertex AI does with the `preCacheCheck` hook's output file before the container
        runs ("The CAIP Pipelines service will update the task's properties and artifacts prior
        to running the executor": tfx/orchestration/kubeflow/v2/file_based_example_gen/
        driver.py): each output artifact gets the metadata the driver gave it (the span, the
        input's fingerprint). The file stays for the executor, which reads its parameters."""
        written = Path(executor_input["outputs"]["outputFile"])
        if not written.exists():
            return
        run.driver_output = json.loads(written.read_text() or "{}")
        for key, told in run.driver_output.get("artifacts", {}).items():
            provisioned = executor_input["outputs"]["artifacts"].get(key)
            if provisioned and told.get("artifacts"):
                artifact = provisioned["artifacts"][0]
                artifact["metadata"] = {
                    **artifact.get("metadata", {}),
                    **told["artifacts"][0].get("metadata", {}),
                }

    def _argument(self, argument: str, executor_input: dict[str, Any]) -> str:
        if argument == "{{$}}":
            return json.dumps(executor_input)
        inputs, outputs = executor_input["inputs"], executor_input["outputs"]
        argument = _INPUT_PARAMETER_PLACEHOLDER.sub(
            lambda m: _text(inputs["parameterValues"][m[1]]), argument
        )
        argument = _INPUT_ARTIFACT_PLACEHOLDER.sub(
            lambda m: _input_artifact_value(
                {k: v["artifacts"] for k, v in inputs["artifacts"].items()}, m
            ),
            argument,
        )

        def output(m: re.Match) -> str:
            if m[2]:
                return outputs["artifacts"][m[2]]["artifacts"][0]["uri"]
            if m[3]:
                return outputs["parameters"][m[3]]["outputFile"]
            return outputs["outputFile"]

        argument = _OUTPUT_PLACEHOLDER.sub(output, argument)
        if "{{$" in argument:
            raise NotImplementedError(f"placeholder in {argument[:200]!r}")
        return self.local(argument)

    def _collect_outputs(self, run: TaskRun, executor_input, definitions) -> None:
        """Reads the executor output back (as the launcher does) and records the artifacts."""
        outputs = executor_input["outputs"]
        written: dict[str, Any] = {}
        if Path(outputs["outputFile"]).exists():
            written = json.loads(Path(outputs["outputFile"]).read_text() or "{}")
        for key, provisioned in outputs["artifacts"].items():
            artifact = dict(provisioned["artifacts"][0])
            told = written.get("artifacts", {}).get(key, {}).get("artifacts", [])
            if told:
                artifact["uri"] = told[0].get("uri") or artifact["uri"]
                artifact["metadata"] = {
                    **artifact.get("metadata", {}),
                    **told[0].get("metadata", {}),
                }
            entry = self.record.add(
                type_title(artifact["type"]),
                artifact["uri"],
                artifact.get("metadata", {}),
                self.run_id,
                run.name,
            )
            run.artifacts[key] = [_runtime_artifact(entry, artifact["type"])]
        for key, output in outputs["parameters"].items():
            if key in written.get("parameterValues", {}):
                run.parameters[key] = written["parameterValues"][key]
            elif Path(output["outputFile"]).exists():
                run.parameters[key] = Path(output["outputFile"]).read_text()


_CEL_ARTIFACT = re.compile(
    r"inputs\.artifacts\['([^']+)'\]\.artifacts\[0\]\.(?:metadata\['([^']+)'\]|(uri))"
)
_CEL_TOKENS = re.compile(r"\s*(&&|\|\||!=|==|<=|>=|<|>|!|\(|\)|'[^']*'|-?\d+(?:\.\d+)?|_a\d+)")


def cel_holds(condition: str, artifacts: dict[str, list[dict]]) -> bool:
    """Evaluates the CEL that TFX's Kubeflow compiler writes for `tfx.dsl.Cond` (its
    `placeholder_utils` subset: `&&`, `||`, `!`, comparisons, string and number literals, and
    an input artifact's `metadata['KEY']` or `uri`), as KFP's driver does. An artifact a task
    did not get reads as null, which equals nothing.

    Raises:
      ValueError: a token outside that subset.
    """
    values: list[Any] = []

    def artifact_value(match: re.Match) -> str:
        found = artifacts.get(match[1]) or []
        if not found:
            values.append(None)
        elif match[3]:
            values.append(found[0]["uri"])
        else:
            values.append(found[0].get("metadata", {}).get(match[2]))
        return f"_a{len(values) - 1}"

    text = _CEL_ARTIFACT.sub(artifact_value, condition).strip()
    python, at = [], 0
    while at < len(text):
        token = _CEL_TOKENS.match(text, at)
        if token is None:
            raise ValueError(f"cannot read {text[at:]!r}")
        at = token.end()
        word = token[1]
        python.append({"&&": " and ", "||": " or ", "!": " not "}.get(word, word))
    names = {f"_a{i}": value for i, value in enumerate(values)}
    return bool(eval(" ".join(python), {"__builtins__": {}}, names))  # noqa: S307 - tokens above


def _runtime_artifact(entry: dict[str, Any], artifact_type: dict[str, Any]) -> dict[str, Any]:
    """A recorded artifact as KFP hands it to a downstream task (a RuntimeArtifact)."""
    return {
        "name": entry["name"],
        "uri": entry["uri"],
        "type": artifact_type,
        "metadata": entry["metadata"],
    }


def _input_artifact_value(artifacts: dict[str, list[dict]], match: re.Match) -> str:
    """An input artifact's URI or metadata value; "" when the input has no artifact (a
    resolver that found none)."""
    found = artifacts.get(match[1]) or []
    if not found:
        return ""
    if match[2] == "uri":
        return found[0]["uri"]
    return _text(found[0].get("metadata", {}).get(match[3], ""))


def _from_legacy(value: dict[str, Any]) -> Any:
    """A schema 2.0 `Value` (`{"intValue": "5"}`) as the plain value it holds."""
    ((kind, held),) = value.items()
    return {"intValue": int, "doubleValue": float, "stringValue": str}[kind](held)


def _to_legacy(value: Any) -> dict[str, Any]:
    """A plain value as a schema 2.0 `Value`."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return {"stringValue": json.dumps(value)}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    return {"stringValue": value}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _topological(tasks: dict[str, dict[str, Any]]) -> list[str]:
    order: list[str] = []
    pending = dict(sorted(tasks.items()))
    while pending:
        ready = [n for n, t in pending.items() if set(t.get("dependentTasks", [])) <= set(order)]
        if not ready:
            raise ValueError(f"a dependency cycle among {sorted(pending)}")
        order.extend(ready)
        for name in ready:
            del pending[name]
    return order


def _tail(log: Path, lines: int = 25) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


# Where Vertex AI mounts the pipeline's bucket in every task's container.
MOUNT = "/gcs/"


def image_environment(project: Path, home: Path) -> dict[str, str]:
    """The Dockerfile's environment, with the project where this checkout has it."""
    return {
        "HOME": str(home),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "TF_USE_LEGACY_KERAS": "1",
        "TF_CPP_MIN_LOG_LEVEL": "3",
        "CONVEYOR_PROJECT": str(project),
        "PYTHONPATH": str(project),
    }


@dataclasses.dataclass
class CompiledJob:
    """A pipeline compiled for Kubeflow with `conveyor compile`, its workdir in a local folder
    standing for the bucket at MOUNT, and an executor for it."""

    job: dict[str, Any]
    spec: Any  # the spec the job was compiled from (PipelineSpec)
    workdir: Path  # the job's workdir, as this machine sees it
    gcs: Path  # the folder standing for the mounted bucket
    executor: JobExecutor
    compile_seconds: float


def compile_job(
    pipeline: str, sets: list[str], tmp: Path, warm: bool = False, fresh_once: bool = False
) -> CompiledJob:
    """`conveyor compile PIPELINE --env kubeflow` with `sets` (`KEY=VALUE`) and the project at
    this checkout (the image holds it at runtime.container.project_root), into `tmp`; `warm`
    and `fresh_once`: how the executor starts each task's interpreter (`JobExecutor`)."""
    from pipelines import cli
    from pipelines.core.project import find_project
    from pipelines.spec.loading import load_spec

    project = find_project().root
    output = tmp / f"{pipeline}.json"
    sets = [*sets, f"runtime.container.project_root={project}"]
    argv = ["compile", pipeline, "--env", "kubeflow", "--output", str(output)]
    started = time.monotonic()
    assert cli.main(argv + [a for s in sets for a in ("--set", s)]) == 0
    compile_seconds = time.monotonic() - started
    job = json.loads(output.read_text())
    spec = load_spec(pipeline, env="kubeflow", overrides=sets).spec
    assert spec.runtime.workdir.startswith(MOUNT), spec.runtime.workdir
    gcs = tmp / "gcs"
    (tmp / "home").mkdir()
    executor = JobExecutor(
        job,
        ArtifactRecord(tmp / "artifact-record.json"),
        mounts={MOUNT: gcs},
        env=image_environment(project, tmp / "home"),
        cwd=project,
        warm=warm,
        fresh_once=fresh_once,
    )
    workdir = gcs / spec.runtime.workdir[len(MOUNT) :]
    return CompiledJob(job, spec, workdir, gcs, executor, compile_seconds)
