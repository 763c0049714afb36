"""A Pusher executor that versions like TF Serving, never exposes half a model, never re-pushes.

Differences from TFX's filesystem Pusher, each a problem users hit in production:
- versions are 1, 2, 3... under `<base>/<model_name>/` instead of Unix timestamps;
- the SavedModel is copied into a hidden sibling directory and renamed into place, so a model
  server polling the base path never sees a partly copied version;
- a model whose files are identical to the version already served is not pushed again;
- the staged copy is flushed to disk before the rename, so a crash never publishes half a model;
- retention (`push.keep_versions`) is not done here but after ML Metadata has recorded the push
  (pipelines/serving_state/reconcile.py): a run killed between the rename and the record must
  still find the version it replaced, to fall back to it;
- the first-run policy: with `require_manual_bless`, a model blessed without any baseline (the
  very first one) is not pushed automatically;
- after the rename, TF Serving's models.config (and monitoring.config, batching.config) beside
  the base path is rewritten atomically with the version labels moved (both steps are
  pipelines/serving_state/push.py), before TFX records the push; the labels moved are recorded
  on the artifact (`conveyor_labels`). With `push.serving_urls` that is two writes, the labels
  moving once the model servers have loaded the version; labels that did not move in time are
  named in `conveyor_reason`.
- with a TF Lite converter before it (`push.tflite`, components/tflite), a passing
  `model.tflite` is copied into the staged version and so appears in the same rename (TF
  Serving started with `--prefer_tflite_model` serves it instead of `saved_model.pb`); a failed
  one is left out (`conveyor_tflite` says why), or holds the push back under
  `push.tflite.required`.
Every outcome is recorded on the ModelPushPath artifact (`pushed`, `pushed_version`, the reason
code `conveyor_reason_code` (a `pipelines.core.outcome.Reason` value) and its words
`conveyor_reason`, `conveyor_model_id`) so `conveyor runs` and the next run's baseline resolver
can read it from ML Metadata.
"""

from __future__ import annotations

import json
import time

from absl import logging
from tfx.components.evaluator import constants
from tfx.components.pusher import executor as tfx_pusher_executor
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import json_utils

from components.baseline.strategy import PUSHED_MODEL_ID_PROPERTY
from components.infra_validator.blessing import infra_refusal
from components.spans.accepted import ACCEPTED_SPANS_KEY, TRAINED_SPANS_PROPERTY, record_blessing
from components.tflite.artifact import TFLITE_FILE, tflite_verdict
from pipelines import serving_state
from pipelines.core.outcome import REASON_CODE_PROPERTY, REASON_PROPERTY, Reason

# With a TF Lite converter before the Pusher: whether model.tflite went in, and why (not).
TFLITE_PROPERTY = "conveyor_tflite"
BASELINE_MODEL_ID = "baseline_model_id"  # what TFX's Evaluator records on its blessing
# On Kubeflow (execution properties, pipelines/builder/nodes/pusher.py): the pipeline's folder
# of run folders and KFP's job name placeholders, naming the run's folder as the exit handler
# names it; the decision is written there.
RUNS_DIR_KEY = "runs_dir"
JOB_NAME_KEY = "job_name"
JOB_RESOURCE_NAME_KEY = "job_resource_name"


class Executor(tfx_pusher_executor.Executor):
    """TFX Pusher executor with atomic, idempotent, integer-versioned filesystem pushes."""

    def Do(self, input_dict, output_dict, exec_properties):  # noqa: N802 - TFX's name
        """Pushes the model or holds it back (`_push_or_hold`); on Kubeflow (RUNS_DIR_KEY
        given) then writes the decision into the run's folder (`write_push_decision`)."""
        self._push_or_hold(input_dict, output_dict, exec_properties)
        if exec_properties.get(RUNS_DIR_KEY):
            write_push_decision(input_dict, output_dict, exec_properties)

    def _push_or_hold(self, input_dict, output_dict, exec_properties) -> None:
        """Pushes the model as the next integer version unless a reason holds it back.

        Not pushed: a model the Evaluator (or the infra validator) did not bless; a first model
        (no baseline) under `first_run_policy: require_manual_bless`; under
        `push.tflite.required`, a model whose TF Lite conversion failed or drifted; a model
        identical to the served version. With a TF Lite converter before it, a passing
        `model.tflite` goes inside the version, in the same atomic rename.
        Either way the outcome and its reason are recorded on the ModelPushPath artifact.
        """
        self._log_startup(input_dict, output_dict, exec_properties)
        model_push = artifact_utils.get_single_instance(
            output_dict[standard_component_specs.PUSHED_MODEL_KEY]
        )
        model = artifact_utils.get_single_instance(input_dict[standard_component_specs.MODEL_KEY])
        model_push.set_int_custom_property(PUSHED_MODEL_ID_PROPERTY, model.id)
        config = json_utils.loads(exec_properties.get("custom_config") or "null") or {}
        if config.get(ACCEPTED_SPANS_KEY):  # Kubeflow: the training window's record
            record_night_blessing(config[ACCEPTED_SPANS_KEY], input_dict)

        def not_pushed(code: Reason, reason: str) -> None:
            logging.info("Not pushed (%s): %s", code.value, reason)
            self._MarkNotPushed(model_push)
            model_push.set_string_custom_property(REASON_CODE_PROPERTY, code.value)
            model_push.set_string_custom_property(REASON_PROPERTY, reason)

        if not self.CheckBlessing(input_dict):
            refused = infra_refusal(input_dict)
            if refused is not None:
                return not_pushed(*refused)
            return not_pushed(
                Reason.MODEL_NOT_BLESSED, "the model did not pass the evaluation thresholds"
            )
        blessing = artifact_utils.get_single_instance(
            input_dict[standard_component_specs.MODEL_BLESSING_KEY]
        )
        first_run = not blessing.has_custom_property(BASELINE_MODEL_ID)
        if first_run and config.get("first_run_policy") == "require_manual_bless":
            return not_pushed(
                Reason.AWAITING_MANUAL_BLESS,
                "no model is served yet and evaluation.first_run is require_manual_bless: "
                "review the run's report, then push this candidate with "
                "`conveyor bless PIPELINE --run RUN_ID --reason TEXT`",
            )
        tflite = tflite_verdict(input_dict)  # None: no converter; else (path or None, reason)
        tflite_note = None
        if tflite is not None:
            tflite_path, why = tflite
            tflite_note = f"with {TFLITE_FILE}" if tflite_path else f"without {TFLITE_FILE}: {why}"
            model_push.set_string_custom_property(TFLITE_PROPERTY, tflite_note)
            logging.info("TF Lite: the version goes %s", tflite_note)
            if tflite_path is None and config.get("tflite_required"):
                return not_pushed(
                    Reason.TFLITE_REFUSED,
                    f"the TF Lite model did not pass (push.tflite.required): {why}",
                )
        model_dir = self.GetModelPath(input_dict)
        base_dir = config["serving_base_dir"]
        digest = serving_state.model_digest(model_dir)
        identical = serving_state.served_as(base_dir, digest)
        if identical is not None:
            return not_pushed(
                Reason.IDENTICAL_TO_SERVED, f"identical to the served version {identical}"
            )
        # With `push` (the pipeline's Pusher node always passes it, builder/nodes/pusher), the
        # labels move after the rename; with push.serving_urls this waits until the model
        # servers have loaded the version (two models.config writes), and the labels that did
        # not move are said in the reason.
        pushed = serving_state.push_version(
            model_dir,
            base_dir,
            {
                "model_digest": digest,
                "model_artifact_id": model.id,
                "model_uri": model.uri,
                "pushed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            },
            push=config.get("push"),
            config_dir=config.get("serving_config_dir"),
            extra_files={TFLITE_FILE: tflite[0]} if tflite and tflite[0] else None,
            echo=logging.info,
        )
        version, target = pushed.version, pushed.target
        reason = f"pushed version {version}"
        if tflite_note:
            reason += f", {tflite_note}"
        if pushed.note:
            reason += f"; {pushed.note}"
        self._MarkPushed(model_push, pushed_destination=target, pushed_version=str(version))
        model_push.set_string_custom_property(
            serving_state.LABELS_PROPERTY, ",".join(pushed.labels)
        )
        model_push.set_string_custom_property(REASON_CODE_PROPERTY, Reason.PUSHED.value)
        model_push.set_string_custom_property(REASON_PROPERTY, reason)
        logging.info("Model pushed to %s.", target)


def record_night_blessing(accepted_dir: str, input_dict) -> None:
    """Records whether the Evaluator blessed the model of this night (the newest span it
    learned from) in the record of accepted spans, which the next nights' training window reads
    on Kubeflow (components/spans/accepted.py); locally ML Metadata answers that."""
    model = artifact_utils.get_single_instance(input_dict[standard_component_specs.MODEL_KEY])
    blessing = artifact_utils.get_single_instance(
        input_dict[standard_component_specs.MODEL_BLESSING_KEY]
    )
    spans = json.loads(model.get_string_custom_property(TRAINED_SPANS_PROPERTY) or "[]")
    blessed = blessing.get_int_custom_property(constants.ARTIFACT_PROPERTY_BLESSED_KEY) == 1
    record_blessing(accepted_dir, spans[-1] if spans else None, blessed)


def write_push_decision(input_dict, output_dict, exec_properties) -> str | None:
    """Writes what this Pusher decided into the Kubeflow run's folder (PUSH_DECISION_FILE):
    the PushedModel's properties, the Model's (with what it learned from) and the blessing's.
    The exit handler reads it for the run's outcome and records it in Conveyor's ML Metadata
    store (pipelines/core/metadata/told_push.py), which KFP's own store, unreadable to any
    task, cannot stand for. Returns the file, or None when KFP resolved no job name."""
    from tfx.dsl.io import fileio

    from components.run_finish.component import kubeflow_run_folder
    from pipelines.core.artifact_files import PUSH_DECISION_FILE
    from pipelines.core.metadata.told_push import described

    folder = kubeflow_run_folder(
        exec_properties[RUNS_DIR_KEY],
        exec_properties.get(JOB_NAME_KEY),
        exec_properties.get(JOB_RESOURCE_NAME_KEY),
    )
    if folder is None:
        logging.warning("No job name from KFP: the push decision is not written.")
        return None

    def single(artifacts, key: str):
        return artifact_utils.get_single_instance(artifacts[key]).mlmd_artifact

    decision = {
        "push": described(single(output_dict, standard_component_specs.PUSHED_MODEL_KEY)),
        "model": described(single(input_dict, standard_component_specs.MODEL_KEY)),
        "blessing": described(single(input_dict, standard_component_specs.MODEL_BLESSING_KEY)),
    }
    fileio.makedirs(folder)
    target = f"{folder}/{PUSH_DECISION_FILE}"
    with fileio.open(target, "w") as handle:
        handle.write(json.dumps(decision, indent=2, sort_keys=True))
    return target
