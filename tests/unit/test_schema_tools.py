"""`conveyor schema` refuses clearly before any statistics exist or for an inferred schema (the
comparisons themselves run on a real pipeline in tests/e2e/test_schema_tools.py)."""

from pipelines import cli


def test_schema_diff_and_accept_refuse_without_statistics(tmp_path, capsys):
    for action in ("diff", "accept"):
        argv = ["schema", action, "penguin", "--env", "ci", "--workdir", str(tmp_path)]
        assert cli.main(argv) == 1
        err = capsys.readouterr().err
        assert err.startswith("error: no statistics of penguin yet in ")
        assert "run the pipeline first" in err


def test_schema_commands_need_a_curated_schema(tmp_path, capsys):
    argv = ["schema", "diff", "penguin", "--env", "ci", "--workdir", str(tmp_path)]
    assert cli.main(argv + ["--set", "schema.source=infer"]) == 1
    err = capsys.readouterr().err
    assert "penguin infers its schema (schema.source: infer)" in err
    assert "reviews curated schemas only" in err
