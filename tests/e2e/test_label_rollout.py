"""Label moves against a model server that, as TF Serving does, refuses a models.config whose
label names a version it has not loaded.

A real `python -m pipelines.serving.model_server` process follows the pipeline's models.config with
TF Serving's rules (`--allow-version-labels-for-unavailable-models`, as the rendered
Deployment starts `tensorflow_model_server`). Pushes, a rollback and a promote go through
`pipelines.serving_state` on a real ML Metadata store (the `Pipeline` of tests/unit/test_labels.py)
with TF Serving's half_plus_two as the model (version k answers 0.5 x + 1 + k, so x = 2 tells
the version). With `push.serving_urls` naming the server every move lands, in two writes,
while two clients keep asking `/labels/stable` and `/labels/canary` and no request fails; a
version the server cannot load leaves the labels where they were and says so; one write, as
without serving_urls, is refused by the server and the label stays.
"""

from __future__ import annotations

import threading
from pathlib import Path

import httpx

from pipelines import cli, serving_state
from pipelines.serving_state.config_files import MODELS_CONFIG
from pipelines.serving_state.records import recorded_state
from tests.half_plus_two import write_half_plus_two
from tests.serving_server import serving, wait_for
from tests.unit.test_labels import Pipeline, _paths

MODEL = "penguin"  # the spec's push.model_name; the versions are half_plus_two


def _half_plus(folder: Path, run: int) -> None:
    write_half_plus_two(folder, offset=run - 1.0)


def _not_a_model(folder: Path, run: int) -> None:
    folder.mkdir(parents=True)
    (folder / "README").write_text("no SavedModel here")


class Clients:
    """Two threads asking `/labels/stable` and `/labels/canary` in a loop: every answer's
    status and version, for the whole test."""

    def __init__(self, url: str):
        self.url = url
        self.stop = threading.Event()
        self.answers: list[tuple[str, int, int | None]] = []
        self.threads = [
            threading.Thread(target=self._loop, args=(n,)) for n in ("stable", "canary")
        ]

    def _loop(self, label: str) -> None:
        with httpx.Client(timeout=30) as http:
            while not self.stop.is_set():
                try:
                    response = http.post(
                        f"{self.url}/v1/models/{MODEL}/labels/{label}:predict",
                        json={"instances": [2.0]},
                    )
                    status = response.status_code
                    version = (
                        round(response.json()["predictions"][0] - 2) if status == 200 else None
                    )
                except (httpx.HTTPError, ValueError, KeyError):
                    status, version = 0, None
                self.answers.append((label, status, version))

    def __enter__(self) -> Clients:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join()


def _answers(server, label: str) -> int | None:
    response = server.post(f"/v1/models/{MODEL}/labels/{label}:predict", {"instances": [2.0]})
    return round(response.json()["predictions"][0] - 2) if response.status_code == 200 else None


def _serves(server, expected: dict[str, int]) -> None:
    for label, version in expected.items():
        wait_for(
            lambda label=label, version=version: _answers(server, label) == version,
            30,
            f"/labels/{label} to answer as version {version}",
        )


def test_two_step_moves_land_on_a_server_that_refuses_labels_on_unloaded_versions(tmp_path, capsys):
    pipeline = Pipeline(_paths(tmp_path))
    one_write = pipeline.paths
    assert pipeline.push(write_model=_half_plus) == 1  # no server yet: one write
    config = one_write.serving_config_dir / MODELS_CONFIG
    args = ["--model-config-file", str(config), "--allow-version-labels-for-unavailable-models"]
    with serving([*args, "--poll-seconds", "0.25"], tmp_path / "server") as server:
        _serves(server, {"stable": 1, "canary": 1})
        two_steps = _paths(
            tmp_path, f"push.serving_urls=[{server.url}]", "push.serving_wait_seconds=60"
        )
        said: list[str] = []
        with Clients(server.url) as clients:
            # A push: version 2 is loaded first, then both labels move to it.
            pipeline.paths = two_steps
            assert pipeline.push(write_model=_half_plus) == 2
            assert pipeline.rollout.on(2) == ["canary", "stable"]
            assert not pipeline.rollout.not_moved
            assert pipeline.entry().labels == {"stable": 2, "canary": 2}
            assert pipeline.entry().versions == (2,)
            _serves(server, {"stable": 2, "canary": 2})

            # A rollback onto version 1, which the labelled policy no longer loads.
            moved = serving_state.rollback(two_steps, None, "ana", "slow", echo=said.append)
            assert moved.after == {"stable": 1, "canary": 1} and moved.held
            assert any("waiting for" in line for line in said)
            _serves(server, {"stable": 1, "canary": 1})

            # Held: the next push moves canary only, in two steps; a promote onto a version
            # the server has loaded already is one write.
            assert pipeline.push(write_model=_half_plus) == 3
            assert pipeline.entry().labels == {"stable": 1, "canary": 3}
            _serves(server, {"stable": 1, "canary": 3})
            said.clear()
            serving_state.promote(two_steps, 3, "stable", "ana", "fine", echo=said.append)
            assert not any("waiting for" in line for line in said)
            _serves(server, {"stable": 3, "canary": 3})

            # A version the server cannot load: it stays in the loaded set, the labels stay.
            assert pipeline.push(write_model=_not_a_model) == 4
            rollout = pipeline.rollout
            assert rollout.not_moved == ("canary", "stable") and rollout.on(4) == []
            assert "failed to load version 4" in rollout.reason
            assert rollout.note().startswith(
                "labels not moved (canary stays on 3, stable stays on 3)"
            )
            assert pipeline.entry().labels == {"stable": 3, "canary": 3}
            assert pipeline.entry().versions == (3, 4)
            assert recorded_state(two_steps)[2].labels == {"stable": 3, "canary": 3}
            assert cli.main(["models", "penguin", "--workdir", str(tmp_path)]) == 0
            assert "loaded without a label: version 4" in capsys.readouterr().out

            # A server that does not answer: the promote moves nothing and records nothing.
            silent = _paths(
                tmp_path, "push.serving_urls=[http://127.0.0.1:9]", "push.serving_wait_seconds=1"
            )
            moves_before = len(pipeline.moves())
            try:
                serving_state.promote(silent, 2, "canary", "ana", "try", echo=said.append)
                raise AssertionError("the promote claimed a move that did not happen")
            except serving_state.LabelError as err:
                assert "labels not moved (canary stays on 3): not AVAILABLE within 1 s" in str(err)
            assert len(pipeline.moves()) == moves_before
            assert pipeline.entry().labels == {"stable": 3, "canary": 3}
            assert pipeline.entry().versions == (2, 3, 4)  # step one of the promote stays

            # One write, as without serving_urls: the server refuses it and the labels stay.
            pipeline.paths = one_write
            assert pipeline.push(write_model=_half_plus) == 5
            assert pipeline.entry().labels == {"stable": 5, "canary": 5}
            refusal = f"Request to assign label to version 5 of model {MODEL}, which is not"
            wait_for(lambda: refusal in server.log(), 30, "the server to refuse the config")
            assert _answers(server, "stable") == 3
            assert server.get(f"/v1/models/{MODEL}/versions/5").status_code == 404
        failed = [answer for answer in clients.answers if answer[1] != 200]
        assert not failed, failed[:5]
        seen = {version for label, _, version in clients.answers if label == "stable"}
        assert {1, 2, 3} <= seen and 5 not in seen
