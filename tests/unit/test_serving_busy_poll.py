"""Busy polling (`busy_poll.py`): after a request is answered the event loop keeps polling for a
window, then sleeps; and the `--busy-poll-us` flag that sets the window."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
import uvloop

from pipelines.serving.model_server.__main__ import build_parser, options_from_args
from pipelines.serving.model_server.busy_poll import BusyPoll
from pipelines.serving.model_server.process_options import DEFAULT_BUSY_POLL_US

MODEL = ["--model-name", "m", "--model-base-path", "/models/m"]
WINDOW_US = 30_000


def _options(argv: list[str]):
    parser = build_parser()
    return options_from_args(parser.parse_args(argv), parser)


def test_the_window_defaults_and_is_read_from_the_command_line(capsys):
    assert _options(MODEL).busy_poll_us == DEFAULT_BUSY_POLL_US > 0
    assert _options([*MODEL, "--busy-poll-us", "0"]).busy_poll_us == 0
    assert _options([*MODEL, "--busy-poll-us", "250"]).busy_poll_us == 250
    with pytest.raises(SystemExit) as exited:
        _options([*MODEL, "--busy-poll-us", "-1"])
    assert exited.value.code == 2
    assert "--busy-poll-us takes 0 (off) or more microseconds" in capsys.readouterr().err


def test_the_loop_polls_for_a_window_after_an_answer_then_sleeps():
    async def scenario() -> dict:
        busy = BusyPoll(WINDOW_US)
        seen = {"before": busy.spinning}
        busy.answered()
        await asyncio.sleep(0.005)
        seen["spinning_within"] = busy.spinning
        seen["rounds_within"] = busy.rounds
        await asyncio.sleep(WINDOW_US / 1e6 + 0.03)
        seen["spinning_after"] = busy.spinning
        parked = busy.rounds
        await asyncio.sleep(0.03)
        seen["rounds_while_parked"] = busy.rounds - parked
        busy.answered()  # the next answer starts a window again
        await asyncio.sleep(0.005)
        seen["spinning_again"] = busy.spinning
        seen["rounds_again"] = busy.rounds - parked
        busy.stop()
        return seen

    seen = uvloop.run(scenario())
    assert seen["before"] is False
    assert seen["spinning_within"] is True
    assert seen["rounds_within"] > 10  # the loop went round, not slept
    assert seen["spinning_after"] is False
    assert seen["rounds_while_parked"] == 0
    assert seen["spinning_again"] is True and seen["rounds_again"] > 10


def test_a_request_that_arrives_while_the_loop_polls_is_read_at_once():
    # The loop spins on ready callbacks, but it still polls its sockets each round: a reader
    # waiting on a socket gets its bytes within the window, as a sleeping loop would give them.
    async def scenario() -> tuple[bytes, float, int]:
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair()
        ours.setblocking(False)
        busy = BusyPoll(WINDOW_US)
        busy.answered()
        await asyncio.sleep(0.002)
        sent = time.perf_counter()
        theirs.send(b"next request")
        data = await loop.sock_recv(ours, 64)
        waited = time.perf_counter() - sent
        rounds = busy.rounds
        busy.stop()
        ours.close()
        theirs.close()
        return data, waited, rounds

    data, waited, rounds = uvloop.run(scenario())
    assert data == b"next request"
    assert rounds > 0
    assert waited < WINDOW_US / 1e6  # read while polling, not after the window ran out
