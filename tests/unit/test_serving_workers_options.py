"""`--workers` on the model server's command line, and the options a worker is started with."""

from __future__ import annotations

import dataclasses
import json

import pytest

from pipelines.serving.model_server.__main__ import build_parser, options_from_args
from pipelines.serving.model_server.server import ServerOptions

MODEL = ["--model-name", "m", "--model-base-path", "/models/m"]


def _options(argv: list[str]) -> ServerOptions:
    parser = build_parser()
    return options_from_args(parser.parse_args(argv), parser)


def test_workers_default_to_one_and_are_read_from_the_command_line():
    assert _options(MODEL).workers == 1
    assert _options([*MODEL, "--workers", "3"]).workers == 3


def test_fewer_than_one_worker_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exited:
        _options([*MODEL, "--workers", "0"])
    assert exited.value.code == 2
    assert "--workers must be at least 1" in capsys.readouterr().err


def test_a_worker_gets_every_option_of_its_server():
    # What serve_workers passes each worker: every field, so an option added later travels too.
    server = _options(
        [
            *("--model-config-file", "/serving/models.config", "--host", "0.0.0.0"),
            *("--port", "0", "--poll-seconds", "0.5", "--monitoring-path", "/metrics"),
            *("--allow-label-moves-to-unavailable-versions", "--workers", "2"),
        ]
    )
    worker = dataclasses.replace(server, workers=1, listen_fd=7, ready_file="/tmp/ready-0.json")
    argv = ["--worker-options", json.dumps(dataclasses.asdict(worker))]
    assert _options(argv) == worker


def test_tensorflow_thread_pools_are_read_like_tf_servings_flags(capsys):
    assert (_options(MODEL).intra_op_threads, _options(MODEL).inter_op_threads) == (0, 0)
    options = _options(
        [*MODEL, "--tensorflow-intra-op-parallelism", "1", "--tensorflow-inter-op-parallelism", "2"]
    )
    assert (options.intra_op_threads, options.inter_op_threads) == (1, 2)
    with pytest.raises(SystemExit):
        _options([*MODEL, "--tensorflow-intra-op-parallelism", "-1"])
    assert "0 (automatic) or more threads" in capsys.readouterr().err
