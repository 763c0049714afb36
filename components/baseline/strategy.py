"""Which model a candidate is compared against: the model Conveyor last pushed to serving.

TFX's LatestBlessedModelStrategy returns the latest blessed model, which on an unchanged re-run
is the (cached) candidate itself: the Evaluator's inputs change, it re-runs, blesses the model
against itself, and the Pusher pushes the same model again as a new version. This strategy
returns the model behind the latest successful push *other than the candidate*, so an unchanged
re-run resolves exactly the inputs it resolved before and every node is a cache hit.
"""

from __future__ import annotations

from tfx.dsl.components.common import resolver

# Keys of the Resolver's input channels (see pipelines.registry).
CANDIDATE_KEY = "candidate"
MODEL_KEY = "model"
PUSH_KEY = "pushed_model"
# Set by components.pusher.executor on every ModelPushPath it writes.
PUSHED_MODEL_ID_PROPERTY = "conveyor_model_id"


class ServedModelStrategy(resolver.ResolverStrategy):
    """Resolves `model` to the latest pushed model that is not the candidate (or to nothing)."""

    def resolve_artifacts(self, store, input_dict):
        del store  # The channels already hold every Model and ModelPushPath of the pipeline.
        candidates = input_dict.get(CANDIDATE_KEY) or []
        candidate_ids = {max(a.id for a in candidates)} if candidates else set()
        models = {m.id: m for m in input_dict.get(MODEL_KEY) or []}
        pushes = sorted(input_dict.get(PUSH_KEY) or [], key=lambda a: a.id, reverse=True)
        for push in pushes:
            if not push.get_int_custom_property("pushed"):
                continue
            model_id = push.get_int_custom_property(PUSHED_MODEL_ID_PROPERTY)
            if model_id in candidate_ids:
                continue
            if model_id in models:
                return {**input_dict, MODEL_KEY: [models[model_id]]}
        return {**input_dict, MODEL_KEY: []}
