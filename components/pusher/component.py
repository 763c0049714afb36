"""TFX's Pusher with Conveyor's executor (see executor.py for what it changes)."""

from tfx.components.pusher import component as pusher_component
from tfx.dsl.components.base import executor_spec

from components.pusher import executor


class Pusher(pusher_component.Pusher):
    """TFX's Pusher (same inputs, outputs and parameters) run by Conveyor's executor."""

    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(executor.Executor)
