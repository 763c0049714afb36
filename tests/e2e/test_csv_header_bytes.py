"""Bytes that are not UTF-8 near the start of a CSV, through `conveyor run` as a person runs
it: the command reads the input's header before the pipeline starts, and a text-mode read
decoded a whole block there, so a bad byte on line 8 of penguin's file ended in a raw
UnicodeDecodeError traceback. Now the header's own bytes are all that is decoded, and the run
fails at ExampleGen with the readers' one paragraph (file, line, byte)."""

import subprocess
import sys
from pathlib import Path

import pytest

from components.csv_input import checks
from pipelines import cli
from pipelines.core.paths import RunPaths
from pipelines.spec.loading import load_spec

pytestmark = pytest.mark.e2e

CONVEYOR = str(Path(sys.executable).with_name("conveyor"))


def test_a_byte_that_is_not_utf8_on_line_8_fails_the_run_with_the_readers_words(tmp_path):
    workdir = tmp_path / "work"
    assert cli.main(["data", "penguin", "--workdir", str(workdir)]) == 0
    paths = RunPaths(workdir=workdir, spec=load_spec("penguin", env="ci", workdir=workdir).spec)
    (csv_path,) = paths.input_dir.glob("*.csv")
    lines = csv_path.read_bytes().splitlines(keepends=True)
    assert lines[7].startswith(b"Adelie,Torgersen,")
    lines[7] = lines[7].replace(b"Torgersen", b"Torg\xe9rsen", 1)
    csv_path.write_bytes(b"".join(lines))
    expected = checks.first_problem([str(csv_path)])
    assert expected is not None and ", line 8: bytes that are not UTF-8 (byte 0xe9" in expected

    done = subprocess.run(
        [CONVEYOR, "run", "penguin", "--env", "ci", "--workdir", str(workdir)],
        capture_output=True,
        text=True,
        timeout=600,
    )

    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "Traceback" not in output and "UnicodeDecodeError" not in output, output
    assert expected.split(", line 8")[1] in output, output  # the readers' words, from line 8 on
    assert f"{csv_path.name}, line 8: bytes that are not UTF-8" in output, output
    assert output.lstrip().startswith("FAILED") or "\nFAILED" in output, output
