"""Which earlier spans a night builds on: only spans whose night went well.

TFX's SpanRangeStrategy takes the latest N spans whatever happened to them, so a night whose
data was blocked (drifted, a column missing) would still be trained on the next night, and
would become the reference the next night's drift is measured against. These strategies ask
ML Metadata instead:
- drift is measured from the newest earlier span a data gate execution accepted (it consumed
  the span's statistics and completed, or was a cache hit of one that did);
- the training window takes the earlier spans whose own night's model was blessed: a span can
  pass the data gate with wrong labels (their distribution unchanged), and then only the
  model gate notices. Such a span must not be learned from again on later nights.
"""

from __future__ import annotations

from ml_metadata.proto import metadata_store_pb2
from tfx.dsl.components.common import resolver

# Keys of the Resolver's input channels (see pipelines.builder.nodes.resolvers).
# The resolved key is given this run's artifact (which also orders the resolver after its
# producer) and resolves to the earlier spans; `candidates` holds every artifact of the type.
EXAMPLES_KEY = "examples"
STATISTICS_KEY = "statistics"
CANDIDATES_KEY = "candidates"
# AcceptedPreviousStatisticsStrategy also resolves the Examples its statistics describe (every
# Examples artifact of the pipeline comes in on this key), so the gate can name their span.
SOURCE_EXAMPLES_KEY = "source_examples"
# Function components register their execution type under the function's module path.
DATA_GATE_TYPE_SUFFIX = ".DataGate"
_ACCEPTING_STATES = (metadata_store_pb2.Execution.COMPLETE, metadata_store_pb2.Execution.CACHED)


def _executions_of_type(store, execution_ids, suffix: str) -> list:
    executions = store.get_executions_by_id(list(execution_ids)) if execution_ids else []
    names = {t.id: t.name for t in store.get_execution_types_by_id({x.type_id for x in executions})}
    return [x for x in executions if names.get(x.type_id, "").endswith(suffix)]


def _linked(store, execution_ids, event_type) -> list[int]:
    if not execution_ids:
        return []
    return [
        e.artifact_id
        for e in store.get_events_by_execution_ids(list(execution_ids))
        if e.type == event_type
    ]


def _input_events_of(store, artifact_ids) -> list:
    if not artifact_ids:
        return []
    return [
        e
        for e in store.get_events_by_artifact_ids(list(artifact_ids))
        if e.type == metadata_store_pb2.Event.INPUT
    ]


def _consumers(store, artifact_ids) -> set[int]:
    return {e.execution_id for e in _input_events_of(store, artifact_ids)}


def _passed_gates(store, events) -> set[int]:
    """The data gate executions among the consumers in `events` that passed (or were cached)."""
    gates = _executions_of_type(store, {e.execution_id for e in events}, DATA_GATE_TYPE_SUFFIX)
    return {x.id for x in gates if x.last_known_state in _ACCEPTING_STATES}


def blessed_artifact_ids(store, examples_ids: list[int]) -> set[int]:
    """The Examples among `examples_ids` that a Trainer learned from in a model an Evaluator
    then blessed."""
    blessed = set()
    for examples_id in examples_ids:
        trainers = _executions_of_type(store, _consumers(store, [examples_id]), ".Trainer")
        models = _linked(store, [t.id for t in trainers], metadata_store_pb2.Event.OUTPUT)
        evaluators = _executions_of_type(store, _consumers(store, models), ".Evaluator")
        outputs = _linked(store, [x.id for x in evaluators], metadata_store_pb2.Event.OUTPUT)
        for artifact in store.get_artifacts_by_id(outputs) if outputs else []:
            if "blessed" in artifact.custom_properties and (
                artifact.custom_properties["blessed"].int_value == 1
            ):
                blessed.add(examples_id)
    return blessed


def _current(input_dict, key: str):
    current = input_dict.get(key) or []
    return max(current, key=lambda a: a.id) if current else None


def examples_span(artifact) -> int:
    """An Examples artifact's span. ExampleGen's driver records it as the custom property
    `span`, leaving the `span` property at 0 (TFX 1.16)."""
    if artifact.has_custom_property("span"):
        return artifact.get_int_custom_property("span")
    return artifact.span


def _newest_per_span(artifacts) -> dict[int, object]:
    newest: dict[int, object] = {}
    for artifact in artifacts:
        span = examples_span(artifact)
        kept = newest.get(span)
        if kept is None or artifact.id > kept.id:
            newest[span] = artifact
    return newest


class TrainingWindowStrategy(resolver.ResolverStrategy):
    """`examples`: this run's span plus the blessed spans among the `num_spans - 1` before it.

    For each span the newest Examples artifact (a re-ingested span supersedes the old one).
    """

    def __init__(self, num_spans: int):
        self._num_spans = int(num_spans)

    def resolve_artifacts(self, store, input_dict):
        """TFX's ResolverStrategy hook: `input_dict` with `examples` set to the window, oldest
        span first, this run's last ([] when this run has no Examples)."""
        current = _current(input_dict, EXAMPLES_KEY)
        if current is None:
            return {**input_dict, EXAMPLES_KEY: []}
        current_span = examples_span(current)
        earliest = current_span - self._num_spans + 1
        earlier = {
            span: artifact
            for span, artifact in _newest_per_span(input_dict.get(CANDIDATES_KEY) or []).items()
            if earliest <= span < current_span
        }
        blessed = blessed_artifact_ids(store, [a.id for a in earlier.values()])
        window = [earlier[s] for s in sorted(earlier) if earlier[s].id in blessed]
        return {**input_dict, EXAMPLES_KEY: window + [current]}


def span_of(artifact_proto) -> int | None:
    """An MLMD artifact's span (ExampleGen records it as a custom property)."""
    for properties in (artifact_proto.custom_properties, artifact_proto.properties):
        if "span" in properties:
            return properties["span"].int_value
    return None


def _input_events(store, execution_ids) -> list:
    return [
        e
        for e in store.get_events_by_execution_ids(list(execution_ids))
        if e.type == metadata_store_pb2.Event.INPUT
    ]


def _key(event) -> str:
    return event.path.steps[0].key if event.path.steps else ""


class AcceptedPreviousStatisticsStrategy(resolver.ResolverStrategy):
    """`statistics`: the statistics a data gate accepted for the newest span before this run's.

    Spans come from the Examples each statistics artifact was computed from: StatisticsGen
    copies the Examples' `span` property, which ExampleGen leaves at 0 (see examples_span).
    """

    def resolve_artifacts(self, store, input_dict):
        """TFX's ResolverStrategy hook: `input_dict` with `statistics` set to the accepted
        statistics of the newest earlier span and `source_examples` to the Examples they were
        computed from (both [] when no earlier span was accepted)."""
        current = _current(input_dict, STATISTICS_KEY)
        current_span = self._source_span(store, current.id) if current is not None else None
        if current_span is None:
            return {**input_dict, STATISTICS_KEY: [], SOURCE_EXAMPLES_KEY: []}
        candidates = {a.id: a for a in input_dict.get(CANDIDATES_KEY) or []}
        events = _input_events_of(store, candidates)
        gates = _passed_gates(store, events)
        statistics_of_gate = {
            e.execution_id: e.artifact_id
            for e in events
            if e.execution_id in gates and _key(e) == STATISTICS_KEY
        }
        # Each passed gate also consumed its night's examples: their span is the night's.
        by_span: dict[int, tuple[object, int]] = {}
        for event in _input_events(store, gates):
            if _key(event) != EXAMPLES_KEY or event.execution_id not in statistics_of_gate:
                continue
            (examples,) = store.get_artifacts_by_id([event.artifact_id])
            span = span_of(examples)
            if span is None or span >= current_span:
                continue
            statistics = candidates[statistics_of_gate[event.execution_id]]
            kept = by_span.get(span)
            if kept is None or statistics.id > kept[0].id:
                by_span[span] = (statistics, examples.id)
        if not by_span:
            return {**input_dict, STATISTICS_KEY: [], SOURCE_EXAMPLES_KEY: []}
        statistics, examples_id = by_span[max(by_span)]
        source = [a for a in input_dict.get(SOURCE_EXAMPLES_KEY) or [] if a.id == examples_id]
        return {**input_dict, STATISTICS_KEY: [statistics], SOURCE_EXAMPLES_KEY: source}

    @staticmethod
    def _source_span(store, statistics_id: int) -> int | None:
        producers = [
            e.execution_id
            for e in store.get_events_by_artifact_ids([statistics_id])
            if e.type == metadata_store_pb2.Event.OUTPUT
        ]
        examples_ids = [e.artifact_id for e in _input_events(store, producers)]
        spans = [span_of(a) for a in store.get_artifacts_by_id(examples_ids)]
        return next((s for s in spans if s is not None), None)
