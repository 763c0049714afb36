"""`--workers 2`: two server processes on one port, connections spread over both (one at a time
and a pool opened at once), their metrics summed, a hot swap under load with no failed
request, and no worker left behind once the server stops.

The server follows the same models.config as the hot-swap test (test_serving_swap.py), whose
load-and-swap helper it reuses. Which worker holds a connection is read from the operating
system (each worker's established TCP connections), not from anything the server says.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.test_serving_swap import MODEL, swap_under_load, write_swap_models
from tests.serving_server import RunningServer, serving

MAX_CONNECTIONS = 32
# Connections a client opens at once (a pool): spread by the kernel's hash over the workers'
# own sockets, fewer than 2 on a worker happens about once in 2,000 runs.
BURST = 16


def _connections_per_worker(server: RunningServer, workers: list[psutil.Process]) -> list[int]:
    """How many established connections to the server's port each worker holds."""
    return [
        sum(
            1
            for c in worker.net_connections("tcp")
            if c.status == psutil.CONN_ESTABLISHED and c.laddr.port == server.port
        )
        for worker in workers
    ]


def _metric(server: RunningServer, name: str) -> dict[tuple, float]:
    """One metric's samples (sorted label items -> value) from the monitoring path."""
    text = server.get("/monitoring/prometheus/metrics").text
    return {
        tuple(sorted(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    }


def _predictions_counted(server: RunningServer) -> float:
    """:predict requests in conveyor_serving_requests_total, over every label set."""
    counted = _metric(server, "conveyor_serving_requests_total")
    return sum(value for labels, value in counted.items() if ("method", "predict") in labels)


def test_two_workers_share_the_port_sum_their_metrics_and_swap_without_a_failed_request(
    tmp_path,
):
    base, config = write_swap_models(tmp_path)
    args = ["--model-config-file", str(config), "--poll-seconds", "0.25", "--workers", "2"]
    # TF Serving's thread-pool flags travel to every worker, and TensorFlow takes them.
    args += ["--tensorflow-intra-op-parallelism", "1", "--tensorflow-inter-op-parallelism", "2"]
    with serving(args, tmp_path / "server") as server:
        workers = psutil.Process(server.process.pid).children()
        assert len(workers) == 2
        assert server.log().count("TensorFlow threads: intra-op 1, inter-op 2") == 2

        # New keep-alive connections until each worker holds one: the kernel hands each
        # connection to one worker.
        clients: list[httpx.Client] = []
        url = f"{server.url}/v1/models/{MODEL}:predict"
        try:
            while (
                len(clients) < MAX_CONNECTIONS
                and min(_connections_per_worker(server, workers)) == 0
            ):
                client = httpx.Client(timeout=30)
                clients.append(client)
                response = client.post(url, json={"instances": [1.0, 2.0, 5.0]})
                assert response.json() == {"predictions": [2.5, 3.0, 4.5]}
            spread = _connections_per_worker(server, workers)
        finally:
            for client in clients:
                client.close()
        assert min(spread) >= 1, f"connections per worker: {spread}"

        # A pool opened at once is spread too: each worker listens on a socket of its own
        # (SO_REUSEPORT). On one shared socket the first worker to wake accepted them all.
        burst = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(BURST)]
        try:
            deadline = time.monotonic() + 10
            while sum(held := _connections_per_worker(server, workers)) < BURST:
                assert time.monotonic() < deadline, f"connections accepted per worker: {held}"
                time.sleep(0.05)
        finally:
            for connection in burst:
                connection.close()
        assert min(held) >= 2, f"a burst of {BURST} connections per worker: {held}"

        # The workers' shared port is still a port in use: a second server started on it
        # stops at once rather than joining the first one's sockets.
        second = subprocess.run(
            [sys.executable, "-m", "pipelines.serving.model_server", *args[:2], "--workers", "2"]
            + ["--port", str(server.port)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert second.returncode == 1, second.stderr
        assert f"cannot listen on 127.0.0.1:{server.port}" in second.stderr

        # Both workers answered; the metrics count every request once, whichever answered.
        assert _predictions_counted(server) == len(clients)
        assert _metric(server, "conveyor_serving_loaded_versions") == {(("model", MODEL),): 1.0}

        run = swap_under_load(server, base)
        assert run.failed() == [], run.failed()[:5]
        # Each client keeps its connection, so its worker: after version 2 answered a client,
        # that client never gets version 1 again. (Across clients the workers load version 2
        # each in its own time, a poll apart at most.)
        assert run.late_v1(per_client=True) == []
        assert {r[4] for r in run.records} == {1, 2}
        print(f"\nhot swap, 2 workers: {run.summary()}; first connections per worker: {spread}")
        assert _predictions_counted(server) == len(clients) + len(run.records)
        assert "half_plus_two version 1 unloaded" in server.log()
    assert not any(worker.is_running() for worker in workers)
