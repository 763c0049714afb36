"""The InfraBlessing as TFX writes it, and its reason as Conveyor records it.

TFX's InfraValidator (tfx/components/infra_validator/executor.py) marks its `InfraBlessing`
with an empty `INFRA_BLESSED` or `INFRA_NOT_BLESSED` file and the integer custom property
`blessed` (1 or 0); TFX's Pusher (`CheckBlessing`) reads only the property. Conveyor's infra
validator writes the same, plus why: the reason code (`conveyor_reason_code`, a
`pipelines.core.outcome.Reason` value) where it refuses a model, and the words
(`conveyor_reason`), which the Pusher repeats when it holds a model back; and which model
server checked it (`conveyor_infra_server`, the runner's kind, and
`conveyor_infra_server_description`), which the run report shows. Light on purpose: the Pusher
imports it.
"""

from __future__ import annotations

import os

from pipelines.core.outcome import REASON_CODE_PROPERTY, REASON_PROPERTY, Reason

BLESSED_KEY = "blessed"
BLESSED_FILE = "INFRA_BLESSED"
NOT_BLESSED_FILE = "INFRA_NOT_BLESSED"
INFRA_BLESSING_KEY = "infra_blessing"  # TFX's Pusher inputs (standard_component_specs)
MODEL_BLESSING_KEY = "model_blessing"
NOT_EVALUATED = "not evaluated as blessed"
# Read by the run report (pipelines/finish/report.py), which sits below components and so
# spells them itself; tests/unit/test_infra_validator_runners.py keeps the two equal.
SERVER_PROPERTY = "conveyor_infra_server"
SERVER_DESCRIPTION_PROPERTY = "conveyor_infra_server_description"


def mark(blessing, blessed: bool, reason: str, code: Reason | None = None) -> None:
    """Marks the `InfraBlessing` artifact exactly as TFX's InfraValidator does, plus `reason`
    and, for a model it did not bless, the reason code (default: the validator refused it)."""
    from tfx.utils import io_utils

    name = BLESSED_FILE if blessed else NOT_BLESSED_FILE
    io_utils.write_string_file(os.path.join(blessing.uri, name), "")
    blessing.set_int_custom_property(BLESSED_KEY, 1 if blessed else 0)
    blessing.set_string_custom_property(REASON_PROPERTY, reason)
    if not blessed:
        blessing.set_string_custom_property(REASON_CODE_PROPERTY, str(code or Reason.INFRA_REFUSED))


def mark_server(blessing, kind: str | None, description: str | None) -> None:
    """Records which model server checked the model (nothing when none was started)."""
    if kind:
        blessing.set_string_custom_property(SERVER_PROPERTY, kind)
    if description:
        blessing.set_string_custom_property(SERVER_DESCRIPTION_PROPERTY, description)


def mark_not_evaluated(blessing) -> None:
    """Marks a model the Evaluator did not bless as not blessed here either, unvalidated: the
    Evaluator's verdict is the run's reason (`Reason.MODEL_NOT_BLESSED`), not a refusal."""
    mark(blessing, False, NOT_EVALUATED, Reason.MODEL_NOT_BLESSED)


def infra_refusal(input_dict) -> tuple[Reason, str] | None:
    """The Pusher's reason code and words for holding back a model the infra validator refused.

    None when there is no infra blessing, when it blesses, or when the Evaluator did not bless
    the model either: the Evaluator's reason is the one to give then, as TFX's Pusher checks the
    model blessing first.
    """
    blessings = input_dict.get(INFRA_BLESSING_KEY) or []
    if len(blessings) != 1:
        return None
    model_blessings = input_dict.get(MODEL_BLESSING_KEY) or []
    if any(b.get_int_custom_property(BLESSED_KEY) != 1 for b in model_blessings):
        return None
    blessing = blessings[0]
    if blessing.get_int_custom_property(BLESSED_KEY) == 1:
        return None

    def recorded(key: str) -> str:
        return blessing.get_string_custom_property(key) if blessing.has_custom_property(key) else ""

    code = Reason(recorded(REASON_CODE_PROPERTY) or Reason.INFRA_REFUSED)
    if code is not Reason.INFRA_REFUSED:
        return None
    why = recorded(REASON_PROPERTY) or "no reason recorded"
    return code, f"the infra validator did not bless the model: {why}"
