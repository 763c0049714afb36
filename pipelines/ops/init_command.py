"""`conveyor init NAME --csv PATH --label COLUMN`: a working spec from a CSV you own.

It reads the CSV as TFX's CSV reader will (only an empty cell is missing), computes TFDV's
statistics of it, and decides each column's fate:
- the label: the task (`--task`, else text or a few small integers: classification; other
  numbers: regression);
- features: numbers are `numeric`, text and integers with few values `categorical`;
- left out, each with a YAML comment saying why: columns with no values or one value, id-like
  columns (a distinct value in every row), free text, names the spec cannot hold, and leaky
  columns (equal to the label, a renaming of it, a column each of whose values goes with one
  label value, one whose ranges separate the classes by themselves, or a number almost
  perfectly correlated with a numeric label): a model would learn them and fail in serving.
The evaluation gate is the baseline a model must beat: the most frequent class's share of rows
(accuracy), or the label's variance (mean squared error, what always predicting the mean gets).

It then copies the CSV into the spec's `data.input_dir` under the workdir (where `conveyor run`
reads it), validates the spec under every profile and prints the next two commands.
Pandas, TFDV and TensorFlow are imported only when the command runs.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MIN_ROWS = 20  # fewer rows cannot train and evaluate anything
# Integers with at most this many distinct values are categories (hours, days, codes).
CATEGORICAL_INTEGERS = 32
# A classification label of integers: at most this many classes, numbered from 0.
MAX_INTEGER_CLASSES = 50
# Text longer than this on average, mostly of several words, is free text, not a category.
TEXT_AVERAGE_LENGTH = 25
LEAKY_CORRELATION = 0.99
# A column "determines the label" only with this many rows per value on average: fewer, and
# any column with many values would by chance.
ROWS_PER_VALUE_FOR_LEAK = 10
MIN_ROWS_PER_CLASS = 5  # for the class-range separation check


class InitError(ValueError):
    """The CSV or the arguments cannot make a spec; the message says which and why."""


@dataclass
class Column:
    """What `conveyor init` decided for one column: a feature (`kind`) or left out (`why`)."""

    name: str
    kind: str | None = None
    options: dict[str, int] = field(default_factory=dict)
    why: str | None = None


@dataclass
class Inference:
    """Everything the spec is written from."""

    rows: int
    label: str
    task: str
    columns: list[Column]
    metric: str
    bound_key: str  # lower_bound or upper_bound
    bound: float
    bound_reason: str

    @property
    def features(self) -> list[Column]:
        """The columns kept as features, in the CSV's order."""
        return [c for c in self.columns if c.kind]

    @property
    def left_out(self) -> list[Column]:
        """The columns left out, each with why."""
        return [c for c in self.columns if c.why]


def read_csv(path: Path):
    """The CSV as TFX's reader sees it: only an empty cell is missing ("NA" is text)."""
    import pandas as pd

    try:
        frame = pd.read_csv(path, keep_default_na=False, na_values=[""], low_memory=False)
    except (OSError, ValueError) as err:  # pandas' ParserError is a ValueError
        raise InitError(f"--csv {path}: cannot read it as CSV: {err}") from None
    if len(frame) < MIN_ROWS:
        raise InitError(
            f"--csv {path}: {len(frame)} rows; a pipeline needs at least {MIN_ROWS} to train "
            "and evaluate a model."
        )
    return frame


def tfdv_columns(frame) -> dict[str, Any]:
    """TFDV's statistics of each column (FeatureNameStatistics by name)."""
    import tensorflow_data_validation as tfdv

    stats = tfdv.generate_statistics_from_dataframe(frame)
    return {f.path.step[0]: f for f in stats.datasets[0].features}


def _label_task(frame, label: str, kind: str, task: str | None) -> str:
    values = frame[label].dropna()
    if values.empty:
        raise InitError(f"--label {label}: the column has no values.")
    if kind == "text":
        if task == "regression":
            raise InitError(f"--label {label}: it holds text; regression needs numbers.")
        return "classification"
    integers = kind == "int"
    few = integers and values.min() >= 0 and values.max() < MAX_INTEGER_CLASSES
    if task == "classification" and not few:
        raise InitError(
            f"--label {label}: classification needs text or integers 0 to "
            f"{MAX_INTEGER_CLASSES - 1} (the classes); this column holds "
            f"{'integers up to ' + str(values.max()) if integers else 'fractional numbers'}. "
            "Use --task regression, or map the classes to text or to 0..K-1."
        )
    if task:
        return task
    return "classification" if few and values.nunique() <= 20 else "regression"


def _kind_of(stats) -> str:
    """TFDV's type of a column: int, float or text."""
    from tensorflow_metadata.proto.v0 import statistics_pb2

    return {
        statistics_pb2.FeatureNameStatistics.INT: "int",
        statistics_pb2.FeatureNameStatistics.FLOAT: "float",
    }.get(stats.type, "text")


def _present(stats) -> int:
    common = stats.num_stats.common_stats if stats.HasField("num_stats") else None
    if common is None:
        common = stats.string_stats.common_stats
    return int(common.num_non_missing)


def _is_free_text(values, stats, distinct: int, present: int) -> bool:
    """Long, mostly multi-word values, most of them different: prose, not a category (company
    names are long and several words too, but few)."""
    if stats.string_stats.avg_length <= TEXT_AVERAGE_LENGTH or distinct < present / 2:
        return False
    words = values.dropna().astype(str).str.split().str.len()
    return bool((words >= 3).mean() > 0.5)


def _leak(frame, name: str, kind: str, label: str, task: str) -> str | None:
    """Why `name` would leak the label, or None."""
    column, target = frame[name], frame[label]
    both = frame[[name, label]].dropna()
    if both.empty:
        return None
    if column.astype(str).equals(target.astype(str)):
        return "leaky: equal to the label in every row"
    if task == "regression":
        if kind in ("int", "float") and len(both) > 2:
            correlation = both[name].astype(float).corr(both[label].astype(float))
            if abs(correlation) >= LEAKY_CORRELATION:
                return f"leaky: correlation {correlation:.3f} with the label"
        return None
    per_value = both.groupby(name)[label].nunique()
    distinct = len(per_value)
    if per_value.max() == 1 and len(both) >= ROWS_PER_VALUE_FOR_LEAK * distinct:
        if both.groupby(label)[name].nunique().max() == 1:
            return "leaky: a renaming of the label (each value goes with one label value)"
        return (
            f"leaky: each of its {distinct} values goes with a single label value, so it "
            "determines the label"
        )
    if kind in ("int", "float"):
        ranges = both.groupby(label)[name].agg(["min", "max", "count"]).sort_values("min")
        if len(ranges) >= 2 and ranges["count"].min() >= MIN_ROWS_PER_CLASS:
            disjoint = (ranges["max"].to_numpy()[:-1] < ranges["min"].to_numpy()[1:]).all()
            if disjoint:
                return (
                    "leaky: its values for each class lie in a range no other class reaches, "
                    "so a threshold of it is the label"
                )
    return None


def infer(frame, label: str, task: str | None) -> Inference:
    """Decides the task, each column's kind or why it is left out, and the evaluation gate."""
    if label not in frame.columns:
        raise InitError(
            f"--label {label}: no such column (columns: {', '.join(map(str, frame.columns))})."
        )
    if not IDENTIFIER.match(label):
        raise InitError(
            f"--label {label!r}: a spec names columns with letters, digits and _ only; rename "
            "the column in the CSV."
        )
    stats = tfdv_columns(frame)
    rows = len(frame)
    task = _label_task(frame, label, _kind_of(stats[label]), task)
    columns = []
    for name in map(str, frame.columns):
        if name == label:
            continue
        column = Column(name)
        columns.append(column)
        if not IDENTIFIER.match(name):
            column.why = "its name is not an identifier (letters, digits, _): rename it to use it"
            continue
        feature = stats.get(name)
        present = _present(feature) if feature is not None else 0
        if present == 0:
            column.why = "no values"
            continue
        kind = _kind_of(feature)
        distinct = int(frame[name].nunique())
        if distinct == 1:
            column.why = "one value in every row: nothing to learn from"
            continue
        if kind == "text" and _is_free_text(frame[name], feature, distinct, present):
            column.why = (
                f"free text (average {feature.string_stats.avg_length:.0f} characters, "
                f"{distinct} distinct values): the trainer takes numeric and categorical features"
            )
            continue
        if kind != "float" and distinct == present == rows:
            column.why = f"id-like: a distinct value in every row ({rows} of {rows})"
            continue
        if leak := _leak(frame, name, kind, label, task):
            column.why = leak
            continue
        if kind == "text":
            column.kind = "categorical"
            if distinct > 1000:
                column.options["max_vocabulary"] = 1000
        elif kind == "int" and distinct <= CATEGORICAL_INTEGERS:
            column.kind = "categorical"
            column.options["hash_buckets"] = max(8, 2 * distinct)
        else:
            column.kind = "numeric"
    if not any(c.kind for c in columns):
        reasons = "; ".join(f"{c.name}: {c.why}" for c in columns) or "it is the only column"
        raise InitError(f"no column besides the label {label!r} can be a feature ({reasons}).")
    values = frame[label].dropna()
    if task == "classification":
        share = float(values.value_counts(normalize=True).iloc[0])
        classes = values.nunique()
        metric = "BinaryAccuracy" if classes == 2 else "SparseCategoricalAccuracy"
        bound = round(share, 3)
        reason = (
            f"at least as accurate as always answering the most frequent class "
            f"({values.value_counts().index[0]!s}, {share:.1%} of rows)"
        )
        return Inference(rows, label, task, columns, metric, "lower_bound", bound, reason)
    variance = float(values.astype(float).var(ddof=0))
    reason = "no worse than always predicting the label's mean (its variance)"
    bound = float(f"{variance:.4g}")
    return Inference(rows, label, task, columns, "MeanSquaredError", "upper_bound", bound, reason)


def render_spec(name: str, inference: Inference, csv_name: str, schema_ref: str | None) -> str:
    """The spec's YAML, with a comment on every column left out (`schema_ref`: the JSON
    Schema's path relative to the spec, for editors; None: no such line)."""

    def feature_line(column: Column) -> str:
        options = "".join(f", {k}: {v}" for k, v in column.options.items())
        return f"    - {{name: {column.name}, kind: {column.kind}{options}}}"

    task_words = "Classify" if inference.task == "classification" else "Predict"
    description = f"{task_words} {inference.label} from the columns of {csv_name}."
    today = datetime.date.today().isoformat()
    lines = [f"# yaml-language-server: $schema={schema_ref}"] if schema_ref else []
    lines += [
        f"# Written by `conveyor init` on {today} from {csv_name} ({inference.rows} rows).",
        "# Review the features, then accept the schema the first run infers (docs/schema.md).",
        f"name: {name}",
        f"description: {json.dumps(description)}",
        "",
        "data:",
        f"  input_dir: data/{name}               # relative to the workdir; `conveyor init` "
        "copied the CSV here",
        "  splits: {train: 2, eval: 1}",
        "",
        "schema:",
        "  source: infer                       # the first run infers it; later runs import it",
        "",
        "trainer:",
        f"  label: {inference.label}",
        f"  task: {inference.task}",
        "  features:",
        *[feature_line(c) for c in inference.features],
    ]
    if inference.left_out:
        lines.append("  # Left out:")
        lines += [f"  # - {c.name}: {c.why}" for c in inference.left_out]
    lines += [
        "  hidden_units: [32, 16]",
        "  train_steps: 500",
        "  batch_size: 64",
        "  learning_rate: 0.01",
        "",
        "evaluation:",
        "  metrics:",
        "    # The model must be",
        f"    # {inference.bound_reason}.",
        f"    - {{name: {inference.metric}, {inference.bound_key}: {inference.bound}}}",
        "  first_run: bless_on_value_thresholds",
        "",
        "push:",
        "  base_dir: serving",
        f"  model_name: {name}",
        "",
    ]
    return "\n".join(lines)


def init_spec(args: argparse.Namespace) -> bool:
    """Writes the spec `args.name` from `args.csv`, copies the CSV where the spec reads it,
    validates the spec under `args.profile` (default: every profile) and prints the next two
    commands; False when it does not validate.

    Raises InitError when the CSV or the arguments cannot make a spec.
    """
    from pipelines.core.paths import FRAMEWORK_ROOT, default_workdir
    from pipelines.spec import checks
    from pipelines.spec import loading as config

    name = args.name
    if not IDENTIFIER.match(name):
        raise InitError(f"NAME {name!r}: use letters, digits and _ (it names the pipeline).")
    source = Path(args.csv)
    if not source.is_file():
        raise InitError(f"--csv {source}: no such file.")
    project = config.current_project()
    specs_dir = project.specs_dir
    output = Path(args.output) if args.output else specs_dir / f"{name}.yaml"
    if output.exists() and not args.force:
        raise InitError(f"{output} exists; pass --force to replace it.")
    workdir = default_workdir(args.workdir)
    input_dir = workdir / "data" / name
    target = input_dir / source.name
    others = [p for p in input_dir.glob("*") if p.is_file() and p.name != source.name]
    if others and not args.force:
        raise InitError(
            f"{input_dir} holds other files ({', '.join(p.name for p in others)}), which the "
            "pipeline would read too; remove them or pass --force to replace them."
        )

    print(f"reading {source} with TFDV...", file=sys.stderr)
    inference = infer(read_csv(source), args.label, args.task)
    # Editors find the JSON Schema by a path relative to the spec: only within the project.
    # (Conveyor's JSON Schema is in its source checkout's docs/, not in the installed package.)
    schema = FRAMEWORK_ROOT / "docs" / "spec.schema.json"
    inside = schema.is_file() and output.parent.resolve().is_relative_to(project.root)
    schema_ref = os.path.relpath(schema, output.parent.resolve()) if inside else None
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(render_spec(name, inference, source.name, schema_ref))

    input_dir.mkdir(parents=True, exist_ok=True)
    for other in others:
        other.unlink()
    if source.resolve() != target.resolve():
        shutil.copyfile(source, target)

    print(
        f"wrote {output}: {inference.task} of {inference.label!r}, "
        f"{len(inference.features)} features"
    )
    for column in inference.left_out:
        print(f"  left out {column.name}: {column.why}")
    print(f"copied {source} to {target}")
    failures = 0
    profiles = [args.profile] if args.profile else config.list_profiles()
    for profile in profiles:
        try:
            loaded = config.load_spec(str(output), env=profile, overrides=args.set, workdir=workdir)
            checks.check_profile(loaded)
        except config.SpecError as err:
            failures += 1
            print(f"FAIL {name} [{profile}]: {err}", file=sys.stderr)
    if failures:
        return False
    print(f"validated under {len(profiles)} profile(s): {', '.join(profiles)}")
    spec_arg = name if output.resolve() == (specs_dir / f"{name}.yaml").resolve() else str(output)
    where = f" --workdir {args.workdir}" if args.workdir else ""
    print("next:")
    print(f"  conveyor run {spec_arg}{where}")
    print(f"  conveyor serve {spec_arg}{where}")
    return True
