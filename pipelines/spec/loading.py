"""Loading a spec: defaults < pipeline spec < Conveyor's profile < the project's profile layer <
`--set key.path=value`.

A profile `ENV` is Conveyor's own `pipelines/profiles/ENV.yaml` (package data) with the
project's `configs/ENV.yaml` over it; either may be missing, not both, and a project may add
profiles of its own. Each file may overlay one pipeline only under `pipelines: NAME:`, applied
right after that file's keys.

Each layer is a YAML mapping merged key by key into the one below it. The loader remembers which
file (or `--set`) supplied each key, so a validation error names the file and the key path that
caused it, in one paragraph, instead of a pydantic traceback.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from pipelines.core import storage
from pipelines.core.object_path import ObjectPath, as_path, under
from pipelines.core.paths import FRAMEWORK_PROFILES_DIR, framework_relative, relative_to_project
from pipelines.core.project import Project, ProjectNotFound, find_project
from pipelines.spec.models import CSV_ONLY_KEYS, DataFormat, PipelineSpec, SchemaSource

# Profile keys that are not spec overlays: `pipelines.<name>` overlays one pipeline only.
_PER_PIPELINE_KEY = "pipelines"


class SpecError(ValueError):
    """A pipeline spec, profile or override is invalid; the message names file and key."""


@dataclass(frozen=True)
class LoadedSpec:
    """A validated spec together with where it came from."""

    spec: PipelineSpec
    env: str
    sources: tuple[str, ...]


def current_project() -> Project:
    """The project commands work on (`pipelines.core.project.find_project`).

    Raises:
      SpecError: with the one paragraph saying where Conveyor looked, when there is none.
    """
    try:
        return find_project()
    except ProjectNotFound as err:
        raise SpecError(str(err)) from None


def list_pipelines() -> list[str]:
    """The pipeline names `conveyor` knows: one per `specs/<name>.yaml` of the project, sorted."""
    return sorted(p.stem for p in current_project().specs_dir.glob("*.yaml"))


def list_profiles() -> list[str]:
    """The profiles `--profile` takes: Conveyor's own and the project's `configs/<name>.yaml`,
    sorted."""
    folders = (FRAMEWORK_PROFILES_DIR, current_project().configs_dir)
    return sorted({p.stem for folder in folders for p in folder.glob("*.yaml")})


def profile_files(env: str, project: Project | None = None) -> list[Path]:
    """The files of profile `env` that exist, lowest layer first: Conveyor's
    `pipelines/profiles/ENV.yaml`, then the project's `configs/ENV.yaml`."""
    project = project or current_project()
    candidates = (FRAMEWORK_PROFILES_DIR / f"{env}.yaml", project.configs_dir / f"{env}.yaml")
    return [path for path in candidates if path.is_file()]


def profile_label(path: Path, project: Project) -> str:
    """How messages name a profile file: relative to the project for its own layer
    (`configs/ci.yaml`), relative to Conveyor's packages for Conveyor's (`pipelines/profiles/
    ci.yaml`, the same wherever Conveyor is installed)."""
    if path.parent == FRAMEWORK_PROFILES_DIR:
        return framework_relative(path)
    return project.relative(path)


class _DuplicateKeyLoader(yaml.SafeLoader):
    """A YAML loader that refuses a key given twice in one mapping (YAML keeps the last)."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_DuplicateKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping
)


def _yaml_problem(err: yaml.YAMLError) -> str:
    """PyYAML's error in one line: where (line, column) and what, without its source excerpt."""
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    context = getattr(err, "context", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return f"{where}{problem}" + (f" ({context})" if context else "")


def read_yaml(path: Path) -> dict[str, Any]:
    """Reads one YAML mapping (a spec or a profile); an empty file reads as {}.

    Raises:
      SpecError: naming the file when it is missing, not valid YAML, gives a key twice in one
        mapping (plain YAML would keep the last silently), or is not a mapping at the top level.
    """
    label = relative_to_project(path)
    if not path.is_file():
        raise SpecError(f"{label}: no such file.")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise SpecError(
            f"{label}: not a YAML text file: byte 0x{raw[err.start]:02x} at line {line} "
            f"(offset {err.start}) is not UTF-8."
        ) from None
    try:
        data = yaml.load(text, Loader=_DuplicateKeyLoader)  # noqa: S506
    except yaml.YAMLError as err:
        raise SpecError(f"{label}: not valid YAML: {_yaml_problem(err)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SpecError(f"{label}: expected a mapping at the top level, got {type(data).__name__}.")
    return data


def _merge(
    base: dict[str, Any],
    overlay: Mapping[str, Any],
    source: str,
    provenance: dict[tuple[str, ...], str],
    prefix: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Deep-merges `overlay` into a copy of `base`; mappings merge, everything else replaces.

    An empty mapping replaces too: it is the only way a layer can clear one (`data.drift={}`).
    """
    merged = dict(base)
    for key, value in overlay.items():
        path = (*prefix, str(key))
        if isinstance(value, Mapping) and value and isinstance(merged.get(key), Mapping):
            merged[key] = _merge(merged[key], value, source, provenance, path)
        else:
            merged[key] = value
            provenance[path] = source
            # A replaced subtree now comes wholly from this source.
            for known in [p for p in provenance if p[: len(path)] == path and p != path]:
                provenance[known] = source
        provenance.setdefault(path, source)
    return merged


def parse_override(assignment: str) -> dict[str, Any]:
    """Turns `trainer.train_steps=50` into `{'trainer': {'train_steps': 50}}` (value is YAML)."""
    key, sep, raw = assignment.partition("=")
    if not sep or not key.strip():
        raise SpecError(f"--set {assignment!r}: expected key.path=value.")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as err:
        raise SpecError(f"--set {assignment!r}: the value is not valid YAML: {err}") from None
    tree: dict[str, Any] = {}
    node = tree
    parts = key.strip().split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return tree


def _describe_error(error: Mapping[str, Any], provenance: Mapping[tuple[str, ...], str]) -> str:
    loc = tuple(str(p) for p in error["loc"])
    # pydantic reports the failing validator of a union/enum after the field; keep field names.
    key_path = ".".join(loc) if loc else "(top level)"
    message = error["msg"].removeprefix("Value error, ")
    if not loc and re.match(r"^[a-z_]+(\[\d+\])?[ .:]", message):
        # A check across sections (the components' wiring) names its own key first; an entry
        # of `components` is named with the file (or `--set`) that gave the list.
        entry = re.match(r"^components\[\d+\]", message)
        known = entry and isinstance(provenance, Provenance)
        source = provenance.source_of(entry.group()) if known else "(defaults)"
        if source != "(defaults)":  # the reference chain is no file's
            return f"{source}: {message.rstrip('.')}."
        return message.rstrip(".") + "."
    source = None
    for length in range(len(loc), -1, -1):
        source = provenance.get(loc[:length])
        if source:
            break
    where = f"{source}: " if source else ""
    kind = error["type"]
    if kind == "extra_forbidden":
        return f"{where}{key_path}: unknown key."
    if kind == "missing":
        return f"{where}{key_path}: required key is missing."
    given = error.get("input")
    shown = "" if isinstance(given, dict | list) or given is None else f" (got {given!r})"
    return f"{where}{key_path}: {message}{shown}."


def _allowed_keys(model: type, loc: tuple[str, ...]) -> list[str] | None:
    """Lists the keys a spec section accepts, to suggest them next to an unknown key."""
    current: Any = model
    for part in loc[:-1]:
        fields = getattr(current, "model_fields", None)
        if fields is None:
            return None
        field = next((f for name, f in fields.items() if name == part or f.alias == part), None)
        if field is None:
            if part.isdigit():
                continue
            return None
        annotation = field.annotation
        current = _model_in(annotation)
        if current is None:
            return None
    fields = getattr(current, "model_fields", None)
    if not fields:
        return None
    return sorted(f.alias or name for name, f in fields.items())


def _model_in(annotation: Any) -> type | None:
    if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _model_in(arg)
        if found is not None:
            return found
    return None


class Provenance(dict):
    """Maps a key path to the file (or `--set`) that supplied it."""

    def source_of(self, dotted_key: str) -> str:
        """The file (or `--set`) that supplied `dotted_key` (`a.b[0].c` form), or of its nearest
        parent key that was supplied whole; "(defaults)" when no layer set it. Error messages use
        it to say where a bad value came from."""
        parts = tuple(dotted_key.replace("[", ".").replace("]", "").split("."))
        for length in range(len(parts), 0, -1):
            if parts[:length] in self:
                return self[parts[:length]]
        return "(defaults)"


def validate_layers(
    layers: Iterable[tuple[str, Mapping[str, Any]]],
) -> tuple[PipelineSpec, Provenance]:
    """Merges (source, mapping) layers in order and validates the result."""
    provenance = Provenance()
    merged: dict[str, Any] = {}
    for source, layer in layers:
        merged = _merge(merged, layer, source, provenance)
    try:
        return PipelineSpec.model_validate(merged), provenance
    except ValidationError as err:
        lines = []
        for error in err.errors():
            line = _describe_error(error, provenance)
            if error["type"] == "extra_forbidden":
                allowed = _allowed_keys(PipelineSpec, tuple(str(p) for p in error["loc"]))
                if allowed:
                    line = line[:-1] + f" (allowed here: {', '.join(allowed)})."
            lines.append(line)
        raise SpecError(" ".join(lines)) from None


def load_spec(
    name_or_path: str,
    env: str = "local",
    overrides: Iterable[str] = (),
    workdir: Path | None = None,
) -> LoadedSpec:
    """Loads, layers and validates a pipeline spec.

    Args:
      name_or_path: a pipeline name under the project's `specs/`, or a path to a YAML file.
      env: the profile: Conveyor's `pipelines/profiles/ENV.yaml` and the project's
        `configs/ENV.yaml` over it (one of them at least).
      overrides: `key.path=value` strings applied last.
      workdir: where relative data paths live; with it, an inferred schema's columns are
        checked against the CSV header when the data already exists.

    Raises:
      SpecError: with the offending file and key path.
    """
    project = current_project()
    path = Path(name_or_path)
    if not (path.suffix in (".yaml", ".yml") and path.exists()):
        path = project.specs_dir / f"{name_or_path}.yaml"
        if not path.exists():
            raise SpecError(
                f"unknown pipeline {name_or_path!r}: no {project.relative(path)} "
                f"in the project {project.root} "
                f"(known pipelines: {', '.join(list_pipelines()) or 'none'})."
            )
    spec_layer = read_yaml(path)
    # A profile is named, never a path: `--profile ../x` would read YAML from outside configs/.
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", env) or ".." in env:
        raise SpecError(
            f"--profile {env!r}: expected the name of a profile in configs/, not a path "
            f"(known profiles: {', '.join(list_profiles())})."
        )
    files = profile_files(env, project)
    if not files:
        raise SpecError(
            f"unknown profile {env!r}: no configs/{env}.yaml in the project and "
            f"none of Conveyor's (known profiles: {', '.join(list_profiles())})."
        )
    layers: list[tuple[str, Mapping[str, Any]]] = [(project.relative(path), spec_layer)]
    # The layers about this pipeline alone: the spec, each file's `pipelines.NAME`, `--set`s.
    about_this = [layers[0]]
    for profile_path in files:
        label = profile_label(profile_path, project)
        profile = read_yaml(profile_path)
        per_pipeline = profile.pop(_PER_PIPELINE_KEY, {}) or {}
        if not isinstance(per_pipeline, dict):
            raise SpecError(f"{label}: {_PER_PIPELINE_KEY}: expected a mapping.")
        this_pipeline = (
            f"{label} ({_PER_PIPELINE_KEY}.{spec_layer.get('name')})",
            per_pipeline.get(spec_layer.get("name"), {}) or {},
        )
        layers += [(label, profile), this_pipeline]
        about_this.append(this_pipeline)
    settings = [(f"--set {o}", parse_override(o)) for o in overrides]
    layers += settings
    spec, provenance = validate_layers(layers)
    # A profile's own keys apply to every pipeline: its CSV reader choice (`large`) is no
    # mistake for a Parquet spec. Only the layers about this pipeline are held to its format.
    check_format_keys(spec, about_this + settings)
    check_columns(spec, provenance, workdir)
    # The run imports the team's modules by the names the spec gives, as validation found them.
    project.put_on_import_path()
    check_user_code(spec, provenance)
    return LoadedSpec(spec=spec, env=env, sources=tuple(source for source, _ in layers))


def check_user_code(spec: PipelineSpec, provenance: Provenance) -> None:
    """The modules a spec names (`trainer.module`, `transform.module`) exist and follow their
    contract, read without being imported, and embedding modules are on disk."""
    from pipelines.spec.user_code import spec_problem

    problem = spec_problem(spec)
    if problem is not None:
        key, message = problem
        raise SpecError(f"{provenance.source_of(key)}: {message}")


def check_format_keys(spec: PipelineSpec, layers: Iterable[tuple[str, Mapping[str, Any]]]) -> None:
    """Refuses CSV reader keys (`data.reader`, `data.bad_rows`, `data.arrow_above_megabytes`) in
    a layer about this pipeline when its `data.format` is not `csv`: nothing would read them.

    Raises:
      SpecError: naming the layer (file or `--set`) and the key.
    """
    if spec.data.format is DataFormat.CSV:
        return
    for source, layer in layers:
        data = layer.get("data")
        if not isinstance(data, Mapping):
            continue
        for key in CSV_ONLY_KEYS:
            if key in data:
                raise SpecError(
                    f"{source}: data.{key}: only the CSV readers read it, and this spec's "
                    f"data.format is {spec.data.format.value!r}; remove it (docs/inputs.md)."
                )


def schema_columns(schema_path: Path) -> list[str]:
    """Feature names of a curated schema.pbtxt (tensorflow_metadata only, no TensorFlow)."""
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    schema = schema_pb2.Schema()
    try:
        text_format.Parse(schema_path.read_text(), schema)
    except text_format.ParseError as err:
        raise SpecError(
            f"{relative_to_project(schema_path)}: not a valid Schema proto: {err}"
        ) from None
    return [feature.name for feature in schema.feature]


def csv_columns(input_dir: str | Path) -> tuple[str, list[str]] | None:
    """The header of the first CSV in `input_dir` (a folder, or a gs:// or s3:// prefix), or
    None when there is no data yet.

    Only the header's own lines are decoded, as the readers decode them (strict UTF-8, line by
    line): a text-mode read decodes a whole block, so a byte that is not UTF-8 further down
    (line 8 of penguin's file) failed here, before the pipeline started, in a raw
    UnicodeDecodeError; the readers' check now finds it at ExampleGen and says where. A header
    that is not UTF-8 gets the readers' words here (SpecError).
    """
    files = storage.glob(storage.join(str(input_dir), "*.csv"))
    if not files:
        return None
    with storage.open(files[0], "rb") as handle:
        header = next(csv.reader(_utf8_lines(handle, files[0])), [])
    return files[0], header


def _utf8_lines(handle, path: str):
    """The lines of a binary file, each decoded as strict UTF-8; a line that is not raises
    SpecError in the words of the readers' check (components/csv_input/checks.py)."""
    offset = 0
    for number, raw in enumerate(handle, start=1):
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise SpecError(
                f"{path}, line {number}: bytes that are not UTF-8 (byte 0x{raw[err.start]:02x} "
                f"at offset {offset + err.start} of the file); save the file as UTF-8"
            ) from None
        offset += len(raw)


def input_columns(spec: PipelineSpec, input_dir: Path) -> tuple[str, list[str]] | None:
    """The first input file of a spec without spans and its columns, for the formats whose
    columns a file's header or footer says cheaply (CSV, Parquet); None otherwise."""
    if spec.data.format is DataFormat.CSV:
        return csv_columns(input_dir)
    if spec.data.format is not DataFormat.PARQUET or spec.data.span_pattern:
        return None
    files = sorted(p for p in as_path(input_dir).glob("*") if p.is_file())
    if not files:
        return None
    import pyarrow.parquet as pq  # only for a Parquet spec whose data is there

    try:
        return str(files[0]), list(pq.read_schema(files[0]).names)
    except Exception:  # noqa: BLE001 - not Parquet: the ExampleGen says so, naming the file
        return None


def has_input_files(spec: PipelineSpec, input_dir: Path) -> bool:
    """Whether `input_dir` holds input for a spec without spans: a `*.csv` for CSV (the files
    `csv_columns` reads; none is opened here), any file for the other formats (ExampleGen reads
    every one)."""
    if spec.data.format is DataFormat.CSV:
        return bool(storage.glob(storage.join(str(input_dir), "*.csv")))
    return any(p.is_file() for p in as_path(input_dir).glob("*"))


def check_columns(spec: PipelineSpec, provenance: Provenance, workdir: Path | None = None) -> None:
    """Every label and feature column the trainer needs, and every input column batch
    inference writes beside its predictions, exists in the schema (or the data)."""
    needed = [("trainer.label", spec.trainer.label)] + [
        (f"trainer.features[{i}].name", f.name) for i, f in enumerate(spec.trainer.features)
    ]
    needed += [
        (f"inference.output_columns[{i}]", column)
        for i, column in enumerate(spec.inference.output_columns)
    ]
    if spec.schema_.source is SchemaSource.FILE:
        schema_path = current_project().file(spec.schema_.path)
        if not schema_path.is_file():
            raise SpecError(
                f"{provenance.source_of('schema.path')}: schema.path: "
                f"no such file {spec.schema_.path!r}."
            )
        columns, origin = schema_columns(schema_path), relative_to_project(schema_path)
    else:
        input_dir = under(as_path(workdir), spec.data.input_dir) if workdir else None
        # Input in a bucket is not read here: `validate` answers without reaching a store (or
        # importing TensorFlow); the run reads its header, and the data gate checks it.
        local = input_dir is not None and not isinstance(input_dir, ObjectPath)
        found = input_columns(spec, input_dir) if local else None
        if found is None:
            return  # Nothing to check against until the data exists; the data gate checks later.
        origin, columns = found
    for key, column in needed:
        if column not in columns:
            raise SpecError(
                f"{provenance.source_of(key)}: {key}: column {column!r} is not in {origin} "
                f"(columns: {', '.join(columns)})."
            )
