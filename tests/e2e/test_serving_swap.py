"""A new version swapped in, and an old one removed, under load: no request fails.

A real server follows a models.config whose policy serves `all` versions of a base path
holding version 1 of TF Serving's half_plus_two, while client threads send :predict requests
(to the latest version) in a loop. Version 2 (half plus three) is renamed into the base
path, as Conveyor's pusher publishes, and later version 1 is renamed away and deleted, as
retention does. Every request must succeed with one version's exact answer, and once a client
has seen version 2 answer, no request sent afterwards may get version 1's.
"""

from __future__ import annotations

import os
import shutil
import threading
import time

import httpx
import numpy as np
from google.protobuf import text_format

from pipelines.serving.config import ServedModel, models_config
from tests.half_plus_two import write_half_plus_two
from tests.serving_server import serving, wait_for

MODEL = "half_plus_two"
CLIENTS = 4
BODY = {"instances": [1.0, 2.0, 5.0]}
ANSWERS = {(2.5, 3.0, 4.5): 1, (3.5, 4.0, 5.5): 2}


def _p99(latencies: list[float]) -> float:
    return float(np.percentile(latencies, 99)) * 1000 if latencies else float("nan")


def test_a_new_version_swaps_in_and_an_old_one_leaves_without_a_failed_request(tmp_path):
    base = tmp_path / MODEL
    write_half_plus_two(base / "1")
    write_half_plus_two(base / ".incoming-2", offset=1.0)  # staged as the pusher stages
    config = tmp_path / "models.config"
    served = ServedModel(name=MODEL, base_path=str(base), policy="all")
    config.write_text(text_format.MessageToString(models_config([served])))

    with serving(
        ["--model-config-file", str(config), "--poll-seconds", "0.25"], tmp_path / "server"
    ) as server:
        url = f"{server.url}/v1/models/{MODEL}:predict"
        stop = threading.Event()
        first_v2_seen = []  # monotonic time a client first received version 2's answer
        records: list[tuple[float, float, int, object]] = []  # sent, latency, status, version
        lock = threading.Lock()

        def client() -> None:
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
                        records.append((sent, done - sent, status, version))
                        if version == 2 and not first_v2_seen:
                            first_v2_seen.append(done)

        threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
        for thread in threads:
            thread.start()
        try:
            time.sleep(1.0)
            swap_started = time.monotonic()
            os.rename(base / ".incoming-2", base / "2")
            wait_for(lambda: first_v2_seen, 60, "version 2 to answer")
            time.sleep(0.5)
            os.rename(base / "1", base / ".retired-1")
            shutil.rmtree(base / ".retired-1")

            def version_1_ended():
                states = server.get(f"/v1/models/{MODEL}").json()["model_version_status"]
                return {s["version"]: s["state"] for s in states} == {"2": "AVAILABLE", "1": "END"}

            wait_for(version_1_ended, 30, "version 1 to be unloaded")
            swap_ended = time.monotonic()
            time.sleep(0.5)
        finally:
            stop.set()
            for thread in threads:
                thread.join()

        failed = [r for r in records if r[2] != 200 or r[3] not in (1, 2)]
        assert failed == [], failed[:5]
        late_v1 = [r for r in records if r[0] > first_v2_seen[0] and r[3] == 1]
        assert late_v1 == [], "a request sent after version 2 answered got version 1"
        assert {r[3] for r in records} == {1, 2}

        before = [r[1] for r in records if r[0] < swap_started]
        during = [r[1] for r in records if swap_started <= r[0] <= swap_ended]
        print(
            f"\nhot swap: {len(records)} requests from {CLIENTS} clients, 0 failed; p99 "
            f"{_p99(before):.1f} ms before the swap ({len(before)} requests), "
            f"{_p99(during):.1f} ms during it ({len(during)} requests, "
            f"{swap_ended - swap_started:.1f} s from the rename to version 1 unloaded)"
        )
        assert "half_plus_two version 1 unloaded" in server.log()
        metrics = server.get("/monitoring/prometheus/metrics").text
        assert f'conveyor_serving_loaded_versions{{model="{MODEL}"}} 1.0' in metrics
