"""A new version swapped in, and an old one removed, under load: no request fails.

A real server follows a models.config whose policy serves `all` versions of a base path
holding version 1 of TF Serving's half_plus_two, while client threads send :predict requests
(to the latest version) in a loop. Version 2 (half plus three) is renamed into the base
path, as Conveyor's pusher publishes, and later version 1 is renamed away and deleted, as
retention does. Every request must succeed with one version's exact answer, and once a client
has seen version 2 answer, no request sent afterwards may get version 1's.

`swap_under_load` is shared with the multi-worker test (test_serving_workers.py).
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
from google.protobuf import text_format

from pipelines.serving_state.config_files import ServedModel, models_config
from tests.half_plus_two import write_half_plus_two
from tests.serving_server import RunningServer, serving, wait_for

MODEL = "half_plus_two"
CLIENTS = 4
BODY = {"instances": [1.0, 2.0, 5.0]}
ANSWERS = {(2.5, 3.0, 4.5): 1, (3.5, 4.0, 5.5): 2}


def _p99(latencies: list[float]) -> float:
    return float(np.percentile(latencies, 99)) * 1000 if latencies else float("nan")


def write_swap_models(root: Path) -> tuple[Path, Path]:
    """Version 1 in the base path, version 2 staged beside it as the pusher stages it, and a
    models.config serving `all` versions; returns (base path, config file)."""
    base = root / MODEL
    write_half_plus_two(base / "1")
    write_half_plus_two(base / ".incoming-2", offset=1.0)
    config = root / "models.config"
    served = ServedModel(name=MODEL, base_path=str(base), policy="all")
    config.write_text(text_format.MessageToString(models_config([served])))
    return base, config


@dataclass
class SwapRun:
    """What the clients saw: one record per request (client, sent, latency, HTTP status,
    version answering or the error), and when the swap started and ended (monotonic)."""

    records: list[tuple[int, float, float, int, object]] = field(default_factory=list)
    first_v2_seen: list[float] = field(default_factory=list)
    swap_started: float = 0.0
    swap_ended: float = 0.0

    def failed(self) -> list:
        """Requests not answered with one version's exact answer."""
        return [r for r in self.records if r[3] != 200 or r[4] not in (1, 2)]

    def late_v1(self, per_client: bool) -> list:
        """Requests answered by version 1 although sent after version 2 had answered (any
        client's request, or with `per_client` the same client's)."""
        if not per_client:
            return [r for r in self.records if r[1] > self.first_v2_seen[0] and r[4] == 1]
        first_v2: dict[int, float] = {}
        for client, sent, latency, _, version in self.records:
            if version == 2:
                first_v2[client] = min(first_v2.get(client, sent + latency), sent + latency)
        return [r for r in self.records if r[4] == 1 and r[1] > first_v2.get(r[0], float("inf"))]

    def summary(self) -> str:
        """Requests, clients and the p99 before and during the swap."""
        before = [r[2] for r in self.records if r[1] < self.swap_started]
        during = [r[2] for r in self.records if self.swap_started <= r[1] <= self.swap_ended]
        return (
            f"{len(self.records)} requests from {CLIENTS} clients, {len(self.failed())} failed; "
            f"p99 {_p99(before):.1f} ms before the swap ({len(before)} requests), "
            f"{_p99(during):.1f} ms during it ({len(during)} requests, "
            f"{self.swap_ended - self.swap_started:.1f} s from the rename to version 1 unloaded)"
        )


def swap_under_load(server: RunningServer, base: Path) -> SwapRun:
    """While CLIENTS threads (one keep-alive connection each) send :predict in a loop: renames
    version 2 into `base`, waits for it to answer, retires version 1 and waits until the
    server reports it ended."""
    url = f"{server.url}/v1/models/{MODEL}:predict"
    stop = threading.Event()
    run = SwapRun()
    lock = threading.Lock()

    def client(number: int) -> None:
        with httpx.Client(timeout=30) as http:
            while not stop.is_set():
                sent = time.monotonic()
                try:
                    response = http.post(url, json=BODY)
                    status = response.status_code
                    version = ANSWERS.get(tuple(response.json().get("predictions", ())))
                except (httpx.HTTPError, ValueError) as err:
                    status, version = 0, repr(err)
                done = time.monotonic()
                with lock:
                    run.records.append((number, sent, done - sent, status, version))
                    if version == 2 and not run.first_v2_seen:
                        run.first_v2_seen.append(done)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(1.0)
        run.swap_started = time.monotonic()
        os.rename(base / ".incoming-2", base / "2")
        wait_for(lambda: run.first_v2_seen, 60, "version 2 to answer")
        time.sleep(0.5)
        os.rename(base / "1", base / ".retired-1")
        shutil.rmtree(base / ".retired-1")

        def version_1_ended():
            states = server.get(f"/v1/models/{MODEL}").json()["model_version_status"]
            return {s["version"]: s["state"] for s in states} == {"2": "AVAILABLE", "1": "END"}

        wait_for(version_1_ended, 30, "version 1 to be unloaded")
        run.swap_ended = time.monotonic()
        time.sleep(0.5)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    return run


def test_a_new_version_swaps_in_and_an_old_one_leaves_without_a_failed_request(tmp_path):
    base, config = write_swap_models(tmp_path)
    with serving(
        ["--model-config-file", str(config), "--poll-seconds", "0.25"], tmp_path / "server"
    ) as server:
        run = swap_under_load(server, base)

        assert run.failed() == [], run.failed()[:5]
        assert run.late_v1(per_client=False) == [], (
            "a request sent after version 2 answered got version 1"
        )
        assert {r[4] for r in run.records} == {1, 2}
        print(f"\nhot swap: {run.summary()}")
        assert "half_plus_two version 1 unloaded" in server.log()
        metrics = server.get("/monitoring/prometheus/metrics").text
        assert f'conveyor_serving_loaded_versions{{model="{MODEL}"}} 1.0' in metrics
