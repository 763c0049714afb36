"""Which model a candidate is compared against: the model Conveyor last pushed to serving.

TFX's LatestBlessedModelStrategy returns the latest blessed model, which on an unchanged re-run
is the (cached) candidate itself: the Evaluator's inputs change, it re-runs, blesses the model
against itself, and the Pusher pushes the same model again as a new version. This strategy
returns the model behind the latest successful push *other than the candidate*, so an unchanged
re-run resolves exactly the inputs it resolved before and every node is a cache hit.
"""

from __future__ import annotations

from ml_metadata.proto import metadata_store_pb2
from tfx.dsl.components.common import resolver

# Keys of the Resolver's input channels (see pipelines.builder.nodes.resolvers).
CANDIDATE_KEY = "candidate"
EXAMPLES_KEY = "examples"
MODEL_KEY = "model"
PUSH_KEY = "pushed_model"
# Set by components.pusher.executor on every ModelPushPath it writes.
PUSHED_MODEL_ID_PROPERTY = "conveyor_model_id"


def _served_models(input_dict, skip) -> list:
    """Models behind successful pushes, newest push first, except those `skip` rejects."""
    models = {m.id: m for m in input_dict.get(MODEL_KEY) or []}
    pushes = sorted(input_dict.get(PUSH_KEY) or [], key=lambda a: a.id, reverse=True)
    served = []
    for push in pushes:
        if not push.get_int_custom_property("pushed"):
            continue
        model = models.get(push.get_int_custom_property(PUSHED_MODEL_ID_PROPERTY))
        if model is not None and not skip(model) and model not in served:
            served.append(model)
    return served


class ServedModelStrategy(resolver.ResolverStrategy):
    """Resolves `model` to the latest pushed model that is not the candidate (or to nothing)."""

    def resolve_artifacts(self, store, input_dict):
        """TFX's ResolverStrategy hook: `input_dict` with `model` narrowed to the latest served
        model other than the candidate ([] before anything was pushed)."""
        del store  # The channels already hold every Model and ModelPushPath of the pipeline.
        candidates = input_dict.get(CANDIDATE_KEY) or []
        candidate_ids = {max(a.id for a in candidates)} if candidates else set()
        served = _served_models(input_dict, skip=lambda m: m.id in candidate_ids)
        return {**input_dict, MODEL_KEY: served[:1]}


class WarmStartModelStrategy(resolver.ResolverStrategy):
    """Resolves `model` to the served model to warm start from, or to nothing.

    The latest served model that was *not* trained on this run's examples: on a re-run with
    the same data, warm starting from the model those very examples produced would change the
    Trainer's inputs, retrain, and defeat the cache. With new data it is the served model.
    """

    def resolve_artifacts(self, store, input_dict):
        """TFX's ResolverStrategy hook: `input_dict` with `model` narrowed to the latest served
        model not trained on this run's `examples` ([] when there is none)."""
        examples = {a.id for a in input_dict.get(EXAMPLES_KEY) or []}

        def trained_on_these_examples(model) -> bool:
            producers = [
                e.execution_id
                for e in store.get_events_by_artifact_ids([model.id])
                if e.type == metadata_store_pb2.Event.OUTPUT
            ]
            consumed = {
                e.artifact_id
                for e in store.get_events_by_execution_ids(producers)
                if e.type == metadata_store_pb2.Event.INPUT
            }
            return bool(examples & consumed)

        served = _served_models(input_dict, skip=trained_on_these_examples)
        return {**input_dict, MODEL_KEY: served[:1]}
