"""The command of every Kubeflow / Vertex AI task: TFX's executor entry point, told first where
Conveyor's custom artifact types live.

TFX's entry point (`tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor`) turns
each artifact of the task's executor input back into its Python class: a standard type through
`compiler_utils.TITLE_TO_CLASS_PATH` (`tfx.Examples` -> `tfx.types.standard_artifacts.Examples`),
any other by importing its schema title as a class path. KFP requires a custom type's title to
be `namespace.Name` (one dot), so a title KFP accepts (`conveyor.DataGateFindings`) is not a
path Python can import, and the task failed with `ImportError: Could not import
conveyor.DataGateFindings`. The compiled command names each custom title and its class
(`--artifact_type=conveyor.DataGateFindings=components.data_gate.component.DataGateFindings`);
this module adds them to that table and runs TFX's entry point unchanged with the rest of the
arguments.

Run in the pipeline image as `python -m pipelines.run.kubeflow_entrypoint [--artifact_type=
TITLE=MODULE.CLASS ...] <TFX's arguments>`.
"""

from __future__ import annotations

import sys

TFX_ENTRYPOINT = "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor"
ARTIFACT_TYPE_FLAG = "--artifact_type="


def artifact_type_flag(title: str, class_path: str) -> str:
    """The command-line flag that tells this entry point `title`'s class."""
    return f"{ARTIFACT_TYPE_FLAG}{title}={class_path}"


def split_arguments(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """({title: class path} from the `--artifact_type` flags, every other argument in order)."""
    types: dict[str, str] = {}
    rest = []
    for argument in argv:
        if argument.startswith(ARTIFACT_TYPE_FLAG):
            title, _, class_path = argument[len(ARTIFACT_TYPE_FLAG) :].partition("=")
            if not title or not class_path:
                raise SystemExit(f"{argument!r}: expected {ARTIFACT_TYPE_FLAG}TITLE=MODULE.CLASS")
            types[title] = class_path
        else:
            rest.append(argument)
    return types, rest


def register_artifact_types(types: dict[str, str]) -> None:
    """Adds `{title: class path}` to the table TFX's entry point reads a type's class from."""
    from tfx.orchestration.kubeflow.v2 import compiler_utils

    compiler_utils.TITLE_TO_CLASS_PATH.update(types)


def main(argv: list[str]) -> None:
    """Registers the named artifact types, then runs TFX's entry point as `python -m` would."""
    import runpy

    from pipelines.core import storage

    types, rest = split_arguments(argv[1:])
    register_artifact_types(types)
    storage.share_beam_s3_clients()  # Beam's s3:// makes a client per call otherwise
    sys.argv = [argv[0], *rest]
    runpy.run_module(TFX_ENTRYPOINT, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv)
