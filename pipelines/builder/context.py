"""What every node build function shares: the spec, its paths, the target, and the channels
published so far by role.

A build function (see `pipelines.spec.components` for the table) reads what it needs with
`ctx.need(role)`, adds its node with `ctx.add(node)` and publishes outputs with
`ctx.provide(role, channel)`. The table's `needs` were checked when the spec was validated, so
a missing role here is a bug in a build function, not in the spec.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components.arrow_example_gen.placement import resolve_reader
from pipelines.core.paths import RunPaths
from pipelines.spec.components import Orchestrator, providers_of
from pipelines.spec.models import PipelineSpec


class BuildError(ValueError):
    """The spec cannot be built for its target; the message says which node and why."""


@dataclass
class BuildContext:
    """The state one `build_pipeline` call threads through the build functions, node by node.

    It exists so that a build function needs only `(ctx, node_id)`: the spec and its paths, the
    orchestrator built for, the span, and the channels earlier nodes published by role.
    `build_nodes` returns it once every node is built: the builder takes its `nodes`, and its
    `notes` say what was built differently for the target.
    """

    spec: PipelineSpec
    paths: RunPaths
    target: Orchestrator = Orchestrator.LOCAL
    # The span this run ingests (None: the spec has no spans, or ExampleGen takes the latest).
    span: int | None = None
    channels: dict[str, Any] = field(default_factory=dict)
    nodes: list[Any] = field(default_factory=list)
    # Nodes that must finish before training starts (a gate that fails stops the run there).
    gates: list[Any] = field(default_factory=list)
    # How each node was built differently for the target (or not at all), by node id.
    notes: dict[str, str] = field(default_factory=dict)
    # Node id -> its outputs by name, for `inputs` that name `node_id.output_name` (a built-in's
    # are the roles it provided; a team's component's, its own output names).
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)

    def need(self, role: str, node_id: str) -> Any:
        """The channel published under `role` by an earlier node."""
        if role not in self.channels:
            raise BuildError(
                f"component {node_id!r} needs {role!r}, which no earlier component provides "
                f"for {self.target.value}; list one of {providers_of(role)} before it in "
                "`components`."
            )
        return self.channels[role]

    def has(self, role: str) -> bool:
        """Whether an earlier node published `role`: for inputs a build function takes only when
        present (a span window, a drift baseline)."""
        return role in self.channels

    def add(self, node: Any) -> Any:
        """Appends `node` to the pipeline's nodes, in build order, and returns it (for chaining)."""
        self.nodes.append(node)
        return node

    def provide(self, role: str, channel: Any) -> None:
        """Publishes `channel` under `role` for the nodes built after this one to `need`."""
        self.channels[role] = channel

    def note(self, node_id: str, how: str) -> None:
        """Records how `node_id` was built where it differs from the plain case (a target other
        than local, an imported previous schema), for messages and `conveyor compile`."""
        self.notes[node_id] = how


def code_version(user_code: dict[str, str] | None = None) -> str:
    """Digest of Conveyor's component code, and of the user code a node runs (`user_code`,
    name -> digest): a change to either invalidates the cached outputs of the nodes that record
    it (the Trainer, Transform, the Arrow reader)."""
    import hashlib

    from pipelines.core.paths import framework_version

    # Executors' code only: from source, an edit to the command line or the report must not
    # re-train; installed, the version pins all of it.
    conveyor = hashlib.sha256(framework_version(("components",)).encode()).hexdigest()
    if not user_code:
        return conveyor[:16]
    combined = hashlib.sha256(conveyor.encode())
    for name, digest in sorted(user_code.items()):
        combined.update(f"{name}={digest}".encode())
    return combined.hexdigest()[:16]


def user_code(spec: PipelineSpec, node: str) -> dict[str, str]:
    """What user code `node` ("trainer" or "transform") runs, name -> 16-hex digest: the
    modules the spec names (their package's source) and the trainer's embedding modules."""
    from pipelines.spec import user_code as user_code_lib

    found: dict[str, str] = {}
    if node == "transform" and spec.transform is not None:
        module = spec.transform.module
        found[module] = user_code_lib.code_digest(module)[:16]
    if node == "trainer":
        if spec.trainer.module is not None:
            found[spec.trainer.module] = user_code_lib.code_digest(spec.trainer.module)[:16]
        for feature in spec.trainer.features:
            if feature.embedding is not None:
                folder = user_code_lib.embedding_path(feature.embedding.module)
                found[feature.embedding.module] = user_code_lib.saved_model_digest(folder)[:16]
    return found


def use_arrow_reader(spec: PipelineSpec, input_dir: Path, span: int | None) -> bool:
    """`data.reader` resolved for this input, by the rule `conveyor validate` states too
    (components/arrow_example_gen/placement.resolve_reader).

    The input sized is what ExampleGen reads: the files of `span` for a spec with spans (the
    latest span on disk when `span` is None, as ExampleGen then takes the latest), else every
    file directly in `input_dir`.
    """

    def input_bytes() -> int:
        if spec.data.span_pattern is None:
            files = [p for p in input_dir.glob("*") if p.is_file()]
        else:
            from pipelines.builder.spans import available_spans, span_files

            latest = span
            if latest is None:
                on_disk = available_spans(spec, input_dir)
                latest = on_disk[-1] if on_disk else None
            files = span_files(spec, input_dir, latest) if latest is not None else []
        return sum(p.stat().st_size for p in files)

    data = spec.data
    chosen, _ = resolve_reader(
        data.reader.value, data.bad_rows.value, data.arrow_above_megabytes, input_bytes
    )
    return chosen == "arrow"
