"""The InfraBlessing as TFX writes it, and its reason as Conveyor records it.

TFX's InfraValidator (tfx/components/infra_validator/executor.py) marks its `InfraBlessing`
with an empty `INFRA_BLESSED` or `INFRA_NOT_BLESSED` file and the integer custom property
`blessed` (1 or 0); TFX's Pusher (`CheckBlessing`) reads only the property. Conveyor's infra
validator writes the same, plus why (`conveyor_reason`), which the Pusher repeats as its own
reason when it holds a model back. Light on purpose: the Pusher imports it.
"""

from __future__ import annotations

import os

BLESSED_KEY = "blessed"
BLESSED_FILE = "INFRA_BLESSED"
NOT_BLESSED_FILE = "INFRA_NOT_BLESSED"
REASON_PROPERTY = "conveyor_reason"
INFRA_BLESSING_KEY = "infra_blessing"  # TFX's Pusher inputs (standard_component_specs)
MODEL_BLESSING_KEY = "model_blessing"
NOT_EVALUATED = "not evaluated as blessed"


def mark(blessing, blessed: bool, reason: str) -> None:
    """Marks the `InfraBlessing` artifact exactly as TFX's InfraValidator does, plus `reason`."""
    from tfx.utils import io_utils

    name = BLESSED_FILE if blessed else NOT_BLESSED_FILE
    io_utils.write_string_file(os.path.join(blessing.uri, name), "")
    blessing.set_int_custom_property(BLESSED_KEY, 1 if blessed else 0)
    blessing.set_string_custom_property(REASON_PROPERTY, reason)


def infra_refusal(input_dict) -> str | None:
    """The Pusher's reason for holding back a model the infra validator did not bless.

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
    reason = (
        blessing.get_string_custom_property(REASON_PROPERTY)
        if blessing.has_custom_property(REASON_PROPERTY)
        else ""
    )
    if reason == NOT_EVALUATED:
        return None
    from pipelines.core.outcome import INFRA_REFUSAL

    return f"{INFRA_REFUSAL}: {reason or 'no reason recorded'}"
