"""TFX's Pusher with Conveyor's executor (see executor.py for what it changes)."""

from tfx import v1 as tfx
from tfx.dsl.components.base import executor_spec

from components.pusher import executor


class Pusher(tfx.components.Pusher):
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(executor.Executor)
