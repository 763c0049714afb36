"""The declarative pipeline definition: typed, strict, frozen models of a pipeline spec.

A spec is read from `specs/<name>.yaml`, layered with a profile from
`configs/<env>.yaml` and `--set key.path=value` overrides (see `pipelines.spec.loading`), and then
validated here. Every model forbids unknown keys and is frozen, so a validated spec cannot drift
between the builder, the runner and the report written next to the run's outputs.

This module imports no TensorFlow or TFX: the command line validates specs in well under a second.
"""

from __future__ import annotations

import datetime
import enum
import re
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from pipelines.core import storage
from pipelines.spec import expressions
from pipelines.spec.components import KNOWN_TYPES, Orchestrator, check_wiring

Identifier = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
# An importable Python module, `package.module` (user code a spec names, never runs).
ModulePath = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")]


def _without_parent(value: str) -> str:
    if ".." in re.split(r"[/\\]", value):
        raise ValueError("a '..' component is not allowed: the path would climb out of its folder")
    return value


def _relative(value: str, base: str) -> str:
    uri = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*):/", value)
    if uri:
        # Without this the URI would be read as a relative path: `<workdir>/gs:/bucket/...`.
        raise ValueError(
            f"a URI ({uri.group(1)}://), not a path relative to the {base}: this key names a "
            f"path inside the {base} (docs/storage.md)"
        )
    if value.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", value):
        raise ValueError(
            f"must be relative to the {base}, not absolute: the spec's files stay in it"
        )
    return _without_parent(value)


def _relative_or_uri(value: str, base: str) -> str:
    """A path relative to `base`, or a gs:// or s3:// URI, checked as the stores accept it."""
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]+:", value):
        storage.check(value, key="")  # StorageError is a ValueError: pydantic names the key
        return value
    return _relative(value, base)


def _without_parent_or_uri(value: str) -> str:
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]+:", value):
        storage.check(value, key="")
        return value
    return _without_parent(value)


def _safe_expression(value: str) -> str:
    expressions.check(value)  # ExpressionError is a ValueError: pydantic names the key
    return value


# Paths a spec gives. Inside the workdir (data, metadata): relative, no `..`, so a spec cannot
# read or write outside the run's folder. The curated schema: relative to the project, so the
# pipeline image (which copies the project) finds it. The serving base may be absolute on
# purpose (a team may serve from a shared path), but never climbs with `..`.
WorkdirPath = Annotated[str, AfterValidator(lambda value: _relative(value, "workdir"))]
ProjectPath = Annotated[str, AfterValidator(lambda value: _relative(value, "project root"))]
NoParentPath = Annotated[str, AfterValidator(_without_parent)]
# Input and serving may live in a bucket of their own (docs/storage.md): a relative path is
# under the workdir (itself a bucket folder when `--workdir` is a URI), a URI stands alone.
WorkdirPathOrUri = Annotated[str, AfterValidator(lambda value: _relative_or_uri(value, "workdir"))]
NoParentPathOrUri = Annotated[str, AfterValidator(_without_parent_or_uri)]
Expression = Annotated[str, AfterValidator(_safe_expression)]


class StrictModel(BaseModel):
    """Base of every spec model: unknown keys are errors and instances are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class PrepareSpec(StrictModel):
    """How `conveyor data NAME` writes the pipeline's input CSV from a file a package ships.

    Nothing is downloaded: the source is a file inside an installed Python package.
    """

    package: str = Field(description="Installed Python package that ships the CSV.")
    path: str = Field(description="Path of the CSV inside the package.")
    columns: tuple[str, ...] = Field(
        default=(), description="Columns to keep, in order (all when empty)."
    )
    derive: dict[Identifier, Expression] = Field(
        default_factory=dict,
        description="New columns from expressions over the source columns: column names, "
        "literals, arithmetic, comparisons, and/or/not, and abs, round, log, sqrt, exp, "
        "where(cond, a, b), isnull, notnull (see pipelines/spec/expressions.py).",
    )
    rows: int | None = Field(default=None, gt=0, description="Keep only the first N rows.")
    filename: WorkdirPath = Field(
        default="data.csv", description="File written into data.input_dir."
    )


class CsvReader(str, enum.Enum):
    """Which ExampleGen reads the CSVs: TFX's own, the streaming Arrow one, or by input size."""

    AUTO = "auto"
    TFX = "tfx"
    ARROW = "arrow"


class BadRows(str, enum.Enum):
    """What the CSV reader does with a row that has the wrong number of fields."""

    FAIL = "fail"
    SKIP = "skip"


class DataFormat(str, enum.Enum):
    """What the input is: files of CSV, TFRecord (of tf.Example) or Parquet, or a BigQuery
    query (compile only: it cannot run here)."""

    CSV = "csv"
    TFRECORD = "tfrecord"
    PARQUET = "parquet"
    BIGQUERY = "bigquery"


class ServingDataFormat(str, enum.Enum):
    """What `data.serving_data_dir` holds: CSV files of the requests serving logged, or a model
    server's request log (TF Serving's PredictionLog records, as `push.request_log` writes)."""

    CSV = "csv"
    PREDICTION_LOG = "prediction_log"


# Keys that only the CSV readers read: a spec of another format that sets one is refused.
CSV_ONLY_KEYS = ("reader", "arrow_above_megabytes", "bad_rows")


class DataSpec(StrictModel):
    """Where the input is (CSV, TFRecord or Parquet files, or a query), how it is split and
    spanned, and the data gate's limits."""

    input_dir: WorkdirPathOrUri = Field(
        description="Directory of the input files, relative to the workdir, or a gs:// or "
        "s3:// URI (docs/storage.md)."
    )
    format: DataFormat = Field(
        default=DataFormat.CSV,
        description="`csv`, `tfrecord` (tf.Example records, gzipped or not: TFX's "
        "ImportExampleGen), `parquet` (Conveyor's Arrow reader) or `bigquery` (`query`; compiles "
        "for Kubeflow, cannot run locally). See docs/inputs.md.",
    )
    query: str | None = Field(
        default=None, description="`format: bigquery`: the SQL query whose rows are the input."
    )
    splits: dict[Identifier, Annotated[int, Field(gt=0)]] = Field(
        default_factory=lambda: {"train": 2, "eval": 1},
        description="Split name to hash-bucket count; needs `train` and `eval`.",
    )
    split_key: Identifier | None = Field(
        default=None,
        description="Assign splits by a hash of this (integer or text) column, not the whole row.",
    )
    reader: CsvReader = Field(
        default=CsvReader.AUTO,
        description="ExampleGen that reads the CSVs: `tfx` (TFX's CsvExampleGen), `arrow` "
        "(streaming Arrow reader) or `auto` (Arrow above arrow_above_megabytes).",
    )
    arrow_above_megabytes: float = Field(
        default=32.0, ge=0, description="`reader: auto` streams with Arrow above this input size."
    )
    bad_rows: BadRows = Field(
        default=BadRows.FAIL,
        description="A row with the wrong number of fields stops the run, or is skipped and "
        "counted (Arrow reader only).",
    )
    prepare: PrepareSpec | None = Field(
        default=None,
        description="How `conveyor data NAME` writes input_dir from a packaged CSV (unset: the "
        "data is put there some other way).",
    )
    span_pattern: str | None = Field(
        default=None,
        description="Files of one span, relative to input_dir, dated with {YYYY}{MM}{DD} "
        "(e.g. '{YYYY}-{MM}-{DD}/*.csv') or numbered with {SPAN}. Unset: every file is one span.",
    )
    window_spans: int = Field(
        default=1,
        ge=1,
        description="The trainer learns from this span and those among the N-1 before it whose "
        "own night's model was blessed (resolved through ML Metadata); statistics, the data "
        "gate and the evaluation look at this night's span only.",
    )
    drift: dict[Identifier, Annotated[float, Field(gt=0)]] = Field(
        default_factory=dict,
        description="Column -> largest distance from the last span that passed the data gate: "
        "L-infinity for string columns, Jensen-Shannon divergence for numeric ones (TFDV's).",
    )
    skew: dict[Identifier, Annotated[float, Field(gt=0)]] = Field(
        default_factory=dict,
        description="Column -> largest training/serving distance, against serving_data_dir.",
    )
    serving_data_dir: WorkdirPathOrUri | None = Field(
        default=None,
        description="The requests serving logged, relative to workdir: CSV files (no label), "
        "or with `serving_data_format: prediction_log` a model server's request log "
        "(`push.request_log` writes `request_logs/<model_name>`); needed by `skew`.",
    )
    serving_data_format: ServingDataFormat = Field(
        default=ServingDataFormat.CSV,
        description="`csv` (`*.csv` files) or `prediction_log` (TF Serving's PredictionLog "
        "TFRecords, `*.tfrecord`, as the model server's request log writes them).",
    )

    @model_validator(mode="after")
    def _span_pattern_form(self) -> DataSpec:
        pattern = self.span_pattern
        if pattern is None:
            if self.window_spans > 1:
                raise ValueError("data.window_spans above 1 needs data.span_pattern")
            return self
        dated = [part in pattern for part in ("{YYYY}", "{MM}", "{DD}")]
        if "{SPAN}" in pattern and any(dated):
            raise ValueError(f"data.span_pattern {pattern!r} mixes {{SPAN}} with a date")
        if "{SPAN}" not in pattern and not all(dated):
            raise ValueError(
                f"data.span_pattern {pattern!r} needs {{SPAN}} or all of {{YYYY}}, {{MM}}, {{DD}}"
            )
        if pattern.startswith("/") or ".." in pattern.split("/"):
            raise ValueError(f"data.span_pattern {pattern!r} must stay inside data.input_dir")
        return self

    @property
    def dated_spans(self) -> bool:
        """Whether spans are nights (`{YYYY}`/`{MM}`/`{DD}` in `span_pattern`), numbered as days
        since 1970-01-01, rather than `{SPAN}` numbers."""
        return self.span_pattern is not None and "{YYYY}" in self.span_pattern

    @model_validator(mode="after")
    def _skew_needs_serving_data(self) -> DataSpec:
        if self.skew and not self.serving_data_dir:
            raise ValueError("data.skew needs data.serving_data_dir (the requests serving logged)")
        return self

    @model_validator(mode="after")
    def _format_keys(self) -> DataSpec:
        if self.format is DataFormat.BIGQUERY:
            if not self.query:
                raise ValueError("data.format 'bigquery' needs data.query (the SQL to read)")
            if self.span_pattern:
                raise ValueError(
                    "data.span_pattern names files; data.format 'bigquery' reads a query"
                )
        elif self.query is not None:
            raise ValueError(
                f"data.query is for data.format 'bigquery'; this spec reads {self.format.value} "
                "files from data.input_dir"
            )
        if self.format is DataFormat.TFRECORD and self.split_key:
            raise ValueError(
                "data.split_key cannot split TFRecord input: TFX's ImportExampleGen splits "
                "serialized records by hash only; remove data.split_key"
            )
        return self

    @model_validator(mode="after")
    def _skipping_needs_arrow(self) -> DataSpec:
        if self.bad_rows is BadRows.SKIP and self.reader is CsvReader.TFX:
            raise ValueError(
                "data.bad_rows 'skip' needs data.reader 'arrow' or 'auto': TFX's CsvExampleGen "
                "cannot skip rows"
            )
        return self

    @field_validator("splits")
    @classmethod
    def _train_and_eval(cls, splits: dict[str, int]) -> dict[str, int]:
        missing = {"train", "eval"} - set(splits)
        if missing:
            raise ValueError(f"splits must include {sorted(missing)} (got {sorted(splits)})")
        return splits


class SchemaSource(str, enum.Enum):
    """Where the schema comes from: a curated file, or inferred from the statistics."""

    FILE = "file"
    INFER = "infer"


class SchemaSpec(StrictModel):
    """The schema the data is validated against and the trainer reads its features from."""

    source: SchemaSource = Field(
        default=SchemaSource.INFER,
        description="`file`: the curated schema at `path` (drift from it is an anomaly); "
        "`infer`: the first run infers one from its statistics, later runs import the last "
        "accepted run's (see docs/schema.md).",
    )
    path: ProjectPath | None = Field(
        default=None, description="Curated schema.pbtxt, relative to the project root."
    )

    @model_validator(mode="after")
    def _path_for_file(self) -> SchemaSpec:
        if self.source is SchemaSource.FILE and not self.path:
            raise ValueError("schema.path is required when schema.source is 'file'")
        return self


class FeatureKind(str, enum.Enum):
    """How the trainer encodes a feature column."""

    NUMERIC = "numeric"
    CATEGORICAL = "categorical"
    TEXT = "text"


class EmbeddingSpec(StrictModel):
    """A pretrained text embedding: a SavedModel (a TF Hub module saved to disk) on a local
    path, called on a batch of strings and returning one vector per string. Nothing is
    downloaded."""

    module: NoParentPath = Field(
        description="Folder of the SavedModel: relative to the project root, or absolute."
    )
    trainable: bool = Field(
        default=False,
        description="Fine-tune the module's weights (only `false` is supported: the "
        "embedding is computed in the model's preprocessing).",
    )

    @field_validator("trainable")
    @classmethod
    def _frozen_only(cls, value: bool) -> bool:
        if value:
            raise ValueError(
                "trainable: true is not supported: the embedding runs in preprocessing, frozen"
            )
        return value


class FeatureSpec(StrictModel):
    """One input column of the model and how it is encoded."""

    name: Identifier = Field(description="Column name, as in the CSV header and the schema.")
    kind: FeatureKind = Field(
        description="`numeric`: standardised with the statistics' mean and deviation, plus a "
        "missing-value indicator; `categorical`: strings looked up in a vocabulary, integers "
        "hashed into buckets, one-hot encoded; `text`: strings embedded by a pretrained "
        "module (`embedding`)."
    )
    max_vocabulary: int = Field(
        default=1000, gt=0, description="Categorical strings: most frequent values kept."
    )
    hash_buckets: int = Field(
        default=64, gt=0, description="Categorical integers: buckets they are hashed into."
    )
    embedding: EmbeddingSpec | None = Field(
        default=None, description="Text: the pretrained module that embeds the column."
    )

    @model_validator(mode="after")
    def _embedding_for_text(self) -> FeatureSpec:
        if self.kind is FeatureKind.TEXT and self.embedding is None:
            raise ValueError(f"feature {self.name!r} is text and needs an `embedding`")
        if self.kind is not FeatureKind.TEXT and self.embedding is not None:
            raise ValueError(f"feature {self.name!r}: `embedding` is for kind text only")
        return self


class Task(str, enum.Enum):
    """What the model predicts: a class of the label, or its value."""

    CLASSIFICATION = "classification"
    REGRESSION = "regression"


class Strategy(str, enum.Enum):
    """tf.distribute strategies. ParameterServerStrategy is not offered: Keras `fit` needs a
    coordinator process and dedicated ps tasks that neither TFX's Trainer nor LocalDagRunner
    provide, so it could not be made correct here."""

    DEFAULT = "default"
    MIRRORED = "mirrored"
    MULTI_WORKER = "multi_worker"


# A training step, counted from 1; strict, so `true` or `2.5` is not read as a step.
StepNumber = Annotated[int, Field(ge=1, strict=True)]


class TrainerSpec(StrictModel):
    """The model Conveyor's Keras trainer builds, and how it trains it."""

    label: Identifier = Field(description="Column the model predicts (not also a feature).")
    task: Task = Field(
        default=Task.CLASSIFICATION,
        description="`classification` (softmax, or sigmoid for a two-class label) or "
        "`regression` (a linear output, mean squared error).",
    )
    features: tuple[FeatureSpec, ...] = Field(
        min_length=1, description="Input columns of the model, each listed once."
    )
    hidden_units: tuple[Annotated[int, Field(gt=0)], ...] = Field(
        default=(32, 16), description="Width of each hidden ReLU layer, input side first."
    )
    dropout: float = Field(
        default=0.0,
        ge=0.0,
        lt=1.0,
        description="Fraction of units dropped after each hidden layer while training (0: none).",
    )
    train_steps: int = Field(default=500, gt=0, description="Training steps (batches) in all.")
    eval_steps: int = Field(
        default=20, gt=0, description="Evaluation-split batches the trainer validates on."
    )
    batch_size: int = Field(default=64, gt=0, description="Global batch, split over replicas.")
    learning_rate: float = Field(default=0.01, gt=0.0, description="Adam's learning rate.")
    scale_learning_rate: bool = Field(
        default=False, description="Multiply the learning rate by the number of replicas."
    )
    gradient_clip_norm: float | None = Field(
        default=None,
        gt=0.0,
        description="Clip the gradients to this global norm (unset: no clipping).",
    )
    distribution: Strategy = Field(
        default=Strategy.DEFAULT,
        description="tf.distribute strategy: `default` (one device), `mirrored` (all local "
        "GPUs, or `devices`), `multi_worker` (MultiWorkerMirroredStrategy from TF_CONFIG).",
    )
    devices: tuple[str, ...] = Field(
        default=(), description="mirrored: devices to use (all local GPUs, else the CPU)."
    )
    jit_compile: bool = Field(
        default=False,
        description="Compile the training step with XLA (several replicas need GPUs for it).",
    )
    mixed_precision: bool = Field(
        default=False, description="mixed_float16 on GPU, mixed_bfloat16 on CPU."
    )
    cache_dataset: bool = Field(default=False, description="Keep parsed records in memory.")
    checkpoint_every_steps: int = Field(
        default=100, gt=0, description="Steps between the checkpoints a re-run resumes from."
    )
    profile_steps: tuple[StepNumber, StepNumber] | None = Field(
        default=None,
        description="`[start, end]`: capture a TensorBoard profiler trace of these training "
        "steps (1-based, inclusive) into the Trainer's ModelRun folder (unset: no trace). "
        "Conveyor's trainer and `build_model` hooks only.",
    )
    warm_start: bool = Field(
        default=False,
        description="Initialise from the served model (needs a warm_start_resolver component).",
    )
    warm_start_step_fraction: float = Field(
        default=1.0,
        gt=0,
        le=1,
        description="The share of `train_steps` a warm-started night trains: a model that "
        "starts from the served one needs fewer steps to match a model trained from scratch "
        "(bench/bench_warm_start.py measures it on taxi). A night with no served model to "
        "start from trains every step.",
    )
    seed: int = Field(default=42, description="Random seed of the weights and the shuffling.")
    module: ModulePath | None = Field(
        default=None,
        description="The team's own trainer module, by import path (code kept in its "
        "repository, never in the spec): one with `run_fn(fn_args)` runs in TFX's Trainer "
        "unchanged; one with `build_model(inputs, spec)` replaces the network on top of "
        "Conveyor's feature layer (see docs/user-code.md).",
    )
    config: dict[str, Any] = Field(
        default_factory=dict,
        description="Passed to the module: `fn_args.custom_config` (run_fn), `spec.config` "
        "(build_model).",
    )

    @field_validator("profile_steps")
    @classmethod
    def _profile_steps_within_training(cls, steps, info: ValidationInfo):
        # A field validator, so the error names the key and where its value came from.
        if steps is None:
            return steps
        start, end = steps
        if start > end:
            raise ValueError(f"[{start}, {end}] starts after it ends")
        train_steps = info.data.get("train_steps")
        if train_steps is not None and end > train_steps:
            raise ValueError(
                f"[{start}, {end}] ends after the training's last step ({train_steps}, "
                "trainer.train_steps)"
            )
        return steps

    @model_validator(mode="after")
    def _label_not_a_feature(self) -> TrainerSpec:
        names = [f.name for f in self.features]
        if self.label in names:
            raise ValueError(f"label {self.label!r} is also listed as a feature")
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"features listed twice: {duplicates}")
        return self


class Direction(str, enum.Enum):
    """Which way a metric improves."""

    HIGHER_IS_BETTER = "higher_is_better"
    LOWER_IS_BETTER = "lower_is_better"


class ChangeThreshold(StrictModel):
    """Gate against the model currently served: candidate minus baseline must pass."""

    direction: Direction = Field(
        default=Direction.HIGHER_IS_BETTER,
        description="Which way the metric improves: `higher_is_better` or `lower_is_better`.",
    )
    absolute: float | None = Field(
        default=None,
        description="Candidate minus baseline must be above this (below, when lower is "
        "better); -0.02 lets the metric get 0.02 worse.",
    )
    relative: float | None = Field(
        default=None,
        description="The same bound on (candidate - baseline) / baseline; -0.05 lets the "
        "metric get 5% worse.",
    )

    @model_validator(mode="after")
    def _some_bound(self) -> ChangeThreshold:
        if self.absolute is None and self.relative is None:
            raise ValueError("a change threshold needs `absolute` or `relative`")
        return self


class MetricSpec(StrictModel):
    """One metric the evaluator computes, and the thresholds a candidate model must pass."""

    name: str = Field(description="A TFMA / Keras metric class name, e.g. AUC.")
    lower_bound: float | None = Field(
        default=None,
        description="The candidate's value over the whole evaluation split must be at least "
        "this (unset: no lower bound).",
    )
    upper_bound: float | None = Field(
        default=None,
        description="The candidate's value over the whole evaluation split must be at most "
        "this (unset: no upper bound).",
    )
    change: ChangeThreshold | None = Field(
        default=None,
        description="Bound on the change from the served model (skipped while none is served).",
    )


class FirstRunPolicy(str, enum.Enum):
    """What the model gate does when no model has been served yet (no baseline)."""

    BLESS_ON_VALUE_THRESHOLDS = "bless_on_value_thresholds"
    REQUIRE_MANUAL_BLESS = "require_manual_bless"


class ConfidenceMethod(str, enum.Enum):
    """How TFMA estimates a metric's confidence interval (20 resamples of the eval split)."""

    JACKKNIFE = "jackknife"
    BOOTSTRAP = "bootstrap"


class ConfidenceSpec(StrictModel):
    """Judge change thresholds with TFMA's confidence interval of candidate minus baseline."""

    level: float = Field(
        default=0.95,
        ge=0.5,
        lt=1.0,
        description="Two-sided confidence level of the interval: a change threshold fails only "
        "when the whole interval of candidate minus baseline lies beyond it: at 0.95 a "
        "candidate exactly at the allowed change is blocked by chance about 2.5% of the time.",
    )
    method: ConfidenceMethod = Field(
        default=ConfidenceMethod.JACKKNIFE,
        description="TFMA's estimator: `jackknife` (20 leave-one-bucket-out samples) or "
        "`bootstrap` (20 Poisson bootstrap samples).",
    )


class EvaluationEngine(str, enum.Enum):
    """What computes the evaluation's metrics (docs/model-gate.md)."""

    AUTO = "auto"
    TFMA = "tfma"
    VECTORIZED = "vectorized"


# TFMA's metrics whose accumulators the vectorized engine computes over whole batches: those
# derived from TFMA's calibration histogram or its binary confusion matrices at fixed
# thresholds (components/evaluator/vectorized.py checks the whole EvalConfig again at run time).
VECTORIZED_METRICS = (
    "AUC",
    "AUCPrecisionRecall",
    "BalancedAccuracy",
    "BinaryAccuracy",
    "CalibrationPlot",
    "ConfusionMatrixPlot",
    "DiagnosticOddsRatio",
    "F1Score",
    "FallOut",
    "FalseDiscoveryRate",
    "FalseNegatives",
    "FalseOmissionRate",
    "FalsePositives",
    "FowlkesMallowsIndex",
    "Informedness",
    "Markedness",
    "MatthewsCorrelationCoefficient",
    "MaxRecall",
    "MissRate",
    "NegativeLikelihoodRatio",
    "NegativePredictiveValue",
    "PositiveLikelihoodRatio",
    "Precision",
    "Prevalence",
    "PrevalenceThreshold",
    "Recall",
    "Specificity",
    "ThreatScore",
    "TrueNegatives",
    "TruePositives",
)


class EvaluationSpec(StrictModel):
    """The model gate: TFMA metrics and thresholds a candidate must pass to be pushed."""

    metrics: tuple[MetricSpec, ...] = Field(
        min_length=1,
        description="Metrics to compute; at least one needs a bound or a change threshold.",
    )
    slices: tuple[tuple[Identifier, ...], ...] = Field(
        default=((),), description="Feature-column lists to slice by; [] is the overall slice."
    )
    first_run: FirstRunPolicy = Field(
        default=FirstRunPolicy.BLESS_ON_VALUE_THRESHOLDS,
        description="With no model served yet: `bless_on_value_thresholds` pushes a model that "
        "passes the bounds; `require_manual_bless` holds it for review, and a person pushes it "
        "with `conveyor bless NAME --run RUN_ID --reason TEXT`.",
    )
    confidence: ConfidenceSpec | None = Field(
        default=None,
        description="Unset: TFMA judges change thresholds on the point values. Set: TFMA also "
        "computes confidence intervals, and a candidate fails a change threshold only when the "
        "regression is significant at `level` (see docs/model-gate.md).",
    )
    engine: EvaluationEngine = Field(
        default=EvaluationEngine.AUTO,
        description="`tfma`: TFX's Evaluator with TFMA. `vectorized`: TFMA's metrics "
        "accumulated over whole batches (same EvalResult and blessing; AUC, accuracy, "
        "precision, recall and the like, slices of one column, no `confidence`). `auto`: "
        "`vectorized` when it computes the whole evaluation and the split has at least 10,000 "
        "examples, else `tfma`.",
    )

    @model_validator(mode="after")
    def _engine_computes_it(self) -> EvaluationSpec:
        if self.engine is not EvaluationEngine.VECTORIZED:
            return self
        reasons = []
        if self.confidence is not None:
            reasons.append("`confidence` (TFMA's intervals resample the examples)")
        others = sorted({m.name for m in self.metrics} - set(VECTORIZED_METRICS))
        if others:
            reasons.append(f"the metrics {others}")
        wide = [list(s) for s in self.slices if len(s) > 1]
        if wide:
            reasons.append(f"slices of several columns {wide}")
        if reasons:
            known = f" (it computes {', '.join(VECTORIZED_METRICS)})" if others else ""
            raise ValueError(
                "evaluation.engine is vectorized, but the vectorized engine cannot compute "
                + "; ".join(reasons)
                + f"{known}. Set evaluation.engine to auto (TFMA then computes what the "
                "vectorized engine cannot) or tfma"
            )
        return self

    @model_validator(mode="after")
    def _gated(self) -> EvaluationSpec:
        if not any(
            m.lower_bound is not None or m.upper_bound is not None or m.change for m in self.metrics
        ):
            raise ValueError(
                "at least one metric needs a threshold, or no model would ever be blessed"
            )
        return self

    @model_validator(mode="after")
    def _confidence_absolute_only(self) -> EvaluationSpec:
        relative = [m.name for m in self.metrics if m.change and m.change.relative is not None]
        if self.confidence is not None and relative:
            raise ValueError(
                "evaluation.confidence judges `change.absolute` thresholds only (TFMA computes "
                f"no interval for a ratio), but {relative} set `change.relative`: use "
                "`change.absolute`, or unset evaluation.confidence"
            )
        return self


class VersionPolicy(str, enum.Enum):
    """Which versions of the base path the model server loads (TF Serving's
    `model_version_policy`)."""

    LATEST = "latest"
    ALL = "all"
    LABELLED = "labelled"


class AfterRollback(str, enum.Enum):
    """What the first push after a `conveyor rollback` becomes."""

    CANARY = "canary"
    STABLE = "stable"


class BatchingSpec(StrictModel):
    """TF Serving's server-side batching (`--batching_parameters_file`)."""

    max_batch_size: int = Field(default=64, ge=1, description="Largest batch the server forms.")
    batch_timeout_micros: int = Field(
        default=1000, ge=0, description="How long a batch waits to fill, in microseconds."
    )
    max_enqueued_batches: int = Field(
        default=100, ge=1, description="Batches queued before requests are refused."
    )
    num_batch_threads: int = Field(
        default=4, ge=1, description="Threads that run batches in parallel."
    )


_MEMORY = re.compile(r"^(\d+(?:\.\d+)?)(K|M|G|T|Ki|Mi|Gi|Ti)?$")
_MEMORY_GB = {None: 1e-9, "K": 1e-6, "M": 1e-3, "G": 1.0, "T": 1e3}
_MEMORY_GB.update({"Ki": 2**10 / 1e9, "Mi": 2**20 / 1e9, "Gi": 2**30 / 1e9, "Ti": 2**40 / 1e9})


class ResourcesSpec(StrictModel):
    """What one node's container asks for on Kubeflow Pipelines / Vertex AI."""

    cpu: float | None = Field(default=None, gt=0, description="vCPU limit.")
    memory: str | None = Field(default=None, description="Memory limit, e.g. 8Gi or 16G.")
    gpu: int = Field(default=0, ge=0, description="Number of GPUs (accelerators).")
    gpu_type: str | None = Field(
        default=None, description="Accelerator type, e.g. NVIDIA_TESLA_T4 (needed with gpu)."
    )

    @field_validator("memory")
    @classmethod
    def _memory_form(cls, value: str | None) -> str | None:
        if value is not None and not _MEMORY.match(value):
            raise ValueError(f"memory {value!r} is not a quantity like 512Mi, 8Gi or 16G")
        return value

    @model_validator(mode="after")
    def _gpu_type_with_gpu(self) -> ResourcesSpec:
        if self.gpu and not self.gpu_type:
            raise ValueError("gpu needs gpu_type (e.g. NVIDIA_TESLA_T4, NVIDIA_L4)")
        if self.gpu_type and not self.gpu:
            raise ValueError(f"gpu_type {self.gpu_type!r} is set but gpu is 0")
        return self

    @property
    def memory_gb(self) -> float | None:
        """The memory limit in GB (10^9 bytes), as KFP's ResourceSpec takes it."""
        if self.memory is None:
            return None
        number, unit = _MEMORY.match(self.memory).groups()
        return float(number) * _MEMORY_GB[unit]


class DeploySpec(StrictModel):
    """What `conveyor deploy render` writes for a model server on Kubernetes."""

    image: str = Field(
        default="tensorflow/serving:2.16.1",
        description="Model server image for `--target tf-serving`.",
    )
    replicas: int = Field(default=1, ge=1, description="Model server replicas.")
    resources: ResourcesSpec = Field(
        default_factory=lambda: ResourcesSpec(cpu=1, memory="2Gi"),
        description="What each model server container asks for (profiles override it).",
    )
    storage_uri: str | None = Field(
        default=None,
        description="Where the cluster reads the model base path (gs://, s3://, pvc://); "
        "unset: a PersistentVolumeClaim named after the model.",
    )
    canary_traffic_percent: int = Field(
        default=10,
        ge=0,
        le=100,
        description="Share of traffic the `canary` label's version gets while it differs from "
        "`stable`'s: KServe's canaryTrafficPercent, or the tf-serving target's HTTPRoute weight.",
    )


class TfLiteQuantization(str, enum.Enum):
    """How the TF Lite converter shrinks the model's weights (`push.tflite.quantization`)."""

    NONE = "none"  # float32 weights and kernels, as the SavedModel has them
    DYNAMIC = "dynamic"  # dynamic range: int8 weights, float activations
    FLOAT16 = "float16"  # float16 weights, computed in float32


# The default `push.tflite.tolerance` by quantization. Measured on the evaluation rows of the
# reference pipelines (`ci` profile, docs/user-code.md#tf-lite): float32 TF Lite kernels agree
# with TensorFlow's to 1.2e-7, so 1e-4 leaves room for other kernels and still catches a wrong
# op; quantized weights moved a probability by up to 0.0068 (taxi, dynamic range) and 0.0051
# (penguin, float16), so 0.02 passes that noise and refuses what a broken conversion does
# (answers off by tenths) and float16's rounding of large constants (taxi: 0.043).
TFLITE_DEFAULT_TOLERANCE = {
    TfLiteQuantization.NONE: 1e-4,
    TfLiteQuantization.DYNAMIC: 0.02,
    TfLiteQuantization.FLOAT16: 0.02,
}


class TfLiteSpec(StrictModel):
    """A TF Lite copy of each pushed model, beside its SavedModel, checked against it first."""

    enabled: bool = Field(
        default=False,
        description="Convert the blessed candidate's `serving_default` to TF Lite (a "
        "`tflite_converter` goes before the Pusher unless `components` lists one) and push "
        "`model.tflite` inside its version folder when it matches the SavedModel.",
    )
    quantization: TfLiteQuantization = Field(
        default=TfLiteQuantization.NONE,
        description="`none` (float32), `dynamic` (dynamic range: int8 weights, for weight "
        "tensors of 1,024 elements or more) or `float16` (every float constant in float16, "
        "normalisation constants included).",
    )
    tolerance: float | None = Field(
        default=None,
        ge=0,
        description="The largest absolute difference allowed between the TF Lite interpreter's "
        "and the SavedModel's floating-point outputs on the same evaluation rows (probabilities, "
        "or predictions in the label's units); unset: 0.0001 for `none`, 0.02 for `dynamic` "
        "and `float16`.",
    )
    parity_rows: int = Field(
        default=200,
        ge=1,
        le=100000,
        description="How many rows of the evaluation split both models answer for the parity "
        "check (fewer when the split has fewer).",
    )
    required: bool = Field(
        default=False,
        description="`false`: a conversion that fails or drifts beyond `tolerance` pushes the "
        "SavedModel without `model.tflite`; `true`: it blocks the push, as an infra "
        "validator's refusal does.",
    )

    @property
    def max_difference(self) -> float:
        """`tolerance`, or its default for the quantization."""
        if self.tolerance is not None:
            return self.tolerance
        return TFLITE_DEFAULT_TOLERANCE[self.quantization]


class InfraServerKind(str, enum.Enum):
    """Which model server the infra validator serves the candidate with."""

    CONVEYOR = "conveyor"
    TENSORFLOW_MODEL_SERVER = "tensorflow_model_server"
    KUBERNETES = "kubernetes"


class RequestLogSpec(StrictModel):
    """The model server's request log (docs/serving.md, Request log): a sampled share of the
    requests it answers, as TF Serving's PredictionLog records, which the next night's data
    gate reads for skew (`data.serving_data_format: prediction_log`)."""

    sampling_rate: float = Field(
        gt=0, le=1, description="Share of answered requests logged (TF Serving's SamplingConfig)."
    )
    dir: NoParentPathOrUri = Field(
        default="request_logs",
        description="Where the log goes, `<dir>/<model_name>/requests-*.tfrecord`; relative "
        "paths are under workdir, a gs:// or s3:// URI a bucket.",
    )
    max_file_megabytes: float = Field(
        default=64.0, gt=0, description="A file past this size is closed and the next begun."
    )
    max_file_seconds: float = Field(
        default=3600.0, gt=0, description="A file this old is closed and the next begun."
    )


class InfraServerSpec(StrictModel):
    """The model server that infra validation starts for the candidate (a runner, as TFX's
    infra validator has: components/infra_validator/runners/)."""

    kind: InfraServerKind = Field(
        default=InfraServerKind.CONVEYOR,
        description="`conveyor`: Conveyor's own model server, a child process of the "
        "validator (no Docker); `tensorflow_model_server`: TF Serving's binary, started with "
        "its own flags; `kubernetes`: the `push.deploy.image` TF Serving image as a Kubernetes "
        "Job beside the validator's pod (the Kubeflow target).",
    )
    binary_path: str | None = Field(
        default=None,
        description="`tensorflow_model_server`: the binary to start (unset: "
        "`tensorflow_model_server` on PATH).",
    )
    namespace: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        description="`kubernetes`: the namespace of the Job (unset: the validator pod's own).",
    )

    @model_validator(mode="after")
    def _settings_of_its_kind(self) -> InfraServerSpec:
        if (
            self.binary_path is not None
            and self.kind is not InfraServerKind.TENSORFLOW_MODEL_SERVER
        ):
            raise ValueError(
                f"binary_path is for kind tensorflow_model_server, not {self.kind.value}"
            )
        if self.namespace is not None and self.kind is not InfraServerKind.KUBERNETES:
            raise ValueError(f"namespace is for kind kubernetes, not {self.kind.value}")
        return self


class PushSpec(StrictModel):
    """Where a blessed model is published for TF Serving, how it is labelled and served, and how
    many versions stay."""

    base_dir: NoParentPathOrUri = Field(
        description="TF Serving model base path; relative paths are under workdir; a gs:// or "
        "s3:// URI serves from a bucket (docs/storage.md)."
    )
    model_name: Identifier = Field(
        description="Name the model is served under: versions are base_dir/model_name/1, 2, ..."
    )
    keep_versions: int | None = Field(
        default=None,
        ge=1,
        description="Retention: after a push, only the newest K versions stay (all when unset); "
        "a version a label points to always stays.",
    )
    version_policy: VersionPolicy = Field(
        default=VersionPolicy.LABELLED,
        description="Which versions the model server loads: `latest` (the newest), `all`, or "
        "`labelled` (the versions the labels point to: TF Serving's `specific`).",
    )
    labels: list[Identifier] = Field(
        default_factory=lambda: ["stable", "canary"],
        description="Version labels Conveyor maintains in models.config (`stable` and "
        "`canary`; empty: none).",
    )
    after_rollback: AfterRollback = Field(
        default=AfterRollback.CANARY,
        description="What the next push becomes after `conveyor rollback`: `canary` (stable "
        "stays on the rolled-back-to version until `conveyor promote`) or `stable`.",
    )
    batching: BatchingSpec | None = Field(
        default=None, description="Server-side batching parameters (none when unset)."
    )
    monitoring_path: str = Field(
        default="/monitoring/prometheus/metrics",
        pattern=r"^/[A-Za-z0-9_/.-]*$",
        description="Path the model server serves Prometheus metrics on.",
    )
    latency_budget_ms: float = Field(
        default=250.0,
        gt=0,
        description="Infra validation: the candidate's p99 latency over the canary requests "
        "must stay within this many milliseconds.",
    )
    canary_requests: int = Field(
        default=40,
        ge=1,
        le=10000,
        description="Infra validation: how many canary requests (rows from the evaluation "
        "split, in both formats) the candidate answers.",
    )
    infra_start_timeout_seconds: float = Field(
        default=120.0,
        gt=0,
        le=3600,
        description="Infra validation: how long the candidate's fresh model server may take to "
        "load it and report ready.",
    )
    infra_server: InfraServerSpec = Field(
        default_factory=InfraServerSpec,
        description="Infra validation: the model server the candidate is served by.",
    )
    serving_urls: list[str] = Field(
        default_factory=list,
        description="REST base URLs (`http://host:8501`) of the model servers that read this "
        "models.config: a label move onto a version they have not loaded is written in two "
        "steps, waiting until each reports it AVAILABLE (none: one write).",
    )
    serving_wait_seconds: float = Field(
        default=300.0,
        gt=0,
        le=3600,
        description="How long a label move waits for the serving_urls to load its version; "
        "after that the version stays loaded and the labels stay where they were.",
    )
    deploy: DeploySpec = Field(
        default_factory=DeploySpec, description="Kubernetes manifests (`conveyor deploy render`)."
    )
    request_log: RequestLogSpec | None = Field(
        default=None,
        description="The model server logs a sampled share of the requests it answers "
        "(none when unset).",
    )
    tflite: TfLiteSpec = Field(
        default_factory=TfLiteSpec,
        description="A TF Lite model inside each pushed version (docs/user-code.md#tf-lite).",
    )

    @field_validator("serving_urls")
    @classmethod
    def _rest_base_urls(cls, urls: list[str]) -> list[str]:
        for url in urls:
            if not re.fullmatch(r"https?://[^/\s?#]+/?", url):
                raise ValueError(
                    f"{url!r} is not a model server's REST base URL such as http://host:8501 "
                    "(scheme, host and port only: Conveyor adds /v1/models/...)"
                )
        return [url.rstrip("/") for url in urls]

    @model_validator(mode="after")
    def _labels_need_a_policy_that_loads_them(self) -> PushSpec:
        if self.labels and self.version_policy is VersionPolicy.LATEST:
            raise ValueError(
                "labels need version_policy `labelled` or `all`: TF Serving refuses a label on "
                "a version it has not loaded, and `latest` loads only the newest"
            )
        if self.labels and "stable" not in self.labels:
            raise ValueError("labels must include `stable`, the version clients get by default")
        if len(set(self.labels)) != len(self.labels):
            raise ValueError(f"labels {self.labels} repeat a name")
        return self


class MetadataKind(str, enum.Enum):
    """Which ML Metadata store records the runs."""

    SQLITE = "sqlite"
    MYSQL = "mysql"


class MetadataSpec(StrictModel):
    """The ML Metadata store: runs, artifacts and lineage, read by resolvers and reports."""

    kind: MetadataKind = Field(
        default=MetadataKind.SQLITE,
        description="`sqlite`: a file under workdir; `mysql`: a server (needs host, port, "
        "database and user).",
    )
    path: WorkdirPath = Field(
        default="metadata.sqlite", description="SQLite file, relative to workdir."
    )
    host: str | None = Field(default=None, description="MySQL server host name (kind mysql).")
    port: int | None = Field(default=None, description="MySQL server port (kind mysql).")
    database: str | None = Field(default=None, description="MySQL database name (kind mysql).")
    user: str | None = Field(default=None, description="MySQL user name (kind mysql).")
    password_env: str | None = Field(
        default=None, description="Name of the environment variable holding the password."
    )

    @model_validator(mode="after")
    def _mysql_fields(self) -> MetadataSpec:
        if self.kind is MetadataKind.MYSQL:
            missing = [k for k in ("host", "port", "database", "user") if not getattr(self, k)]
            if missing:
                raise ValueError(f"metadata.kind 'mysql' needs {missing}")
        return self


# registry[:port]/path[:tag|@sha256:digest], lower case as Docker requires.
_IMAGE = re.compile(
    r"^[a-z0-9]+([._-][a-z0-9]+)*(\.[a-z0-9-]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*"
    r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|@sha256:[0-9a-f]{64})?$"
)


# A Kubernetes object name (RFC 1123 subdomain), as a Secret's metadata.name must be.
_K8S_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


class SecretRef(StrictModel):
    """One key of a Kubernetes Secret in the namespace the job's pods run in. The value stays in
    the cluster: what is compiled names the secret and the key, and the kubelet sets the
    variable when the pod starts."""

    secret: Annotated[str, Field(pattern=_K8S_NAME, max_length=253)] = Field(
        description="The Secret's name (metadata.name)."
    )
    key: Annotated[str, Field(pattern=r"^[-._a-zA-Z0-9]+$", max_length=253)] = Field(
        description="The key in the Secret's data whose value the variable gets."
    )


class ContainerSpec(StrictModel):
    """The pipeline image (built from the repository's Dockerfile) and what each node asks for."""

    image: str | None = Field(
        default=None, description="Image every node runs in; needed by orchestrator kubeflow."
    )
    project_root: str = Field(
        default="/conveyor", description="Where the Dockerfile puts the project in the image."
    )
    resources: dict[Identifier, ResourcesSpec] = Field(
        default_factory=dict,
        description="Node id (or `default`, for every node) -> its container's resources.",
    )
    secret_env: dict[Identifier, SecretRef] = Field(
        default_factory=dict,
        description="Environment variable -> the key of a Kubernetes Secret it is set from, in "
        "every task of a compiled Kubeflow job (the variables runtime.alert_webhook_env and "
        "metrics.pushgateway_url_env name, a team's tokens). The job names the secret and the "
        "key, never a value. Open-source KFP applies it; Vertex AI has no Kubernetes secrets.",
    )

    @field_validator("image")
    @classmethod
    def _image_form(cls, value: str | None) -> str | None:
        if value is not None and not _IMAGE.match(value):
            raise ValueError(
                f"image {value!r} is not an image reference (registry/path:tag or @sha256:digest)"
            )
        return value


_BEAM_RUNNERS = {
    # runner -> options it cannot start without
    "DirectRunner": (),
    "DataflowRunner": ("project", "region", "temp_location"),
    "FlinkRunner": ("flink_master",),
    "SparkRunner": ("spark_master_url",),
    "PortableRunner": ("job_endpoint",),
}
_DIRECT_MODES = ("in_memory", "multi_threading", "multi_processing")


def parse_beam_args(args: tuple[str, ...] | list[str]) -> dict[str, list[str]]:
    """`--key=value`, `--key value` and `--flag` Beam arguments -> {key: [values]}."""
    options: dict[str, list[str]] = {}
    key = None
    for arg in args:
        if arg.startswith("--") and len(arg) > 2:
            key, sep, value = arg[2:].partition("=")
            options.setdefault(key, [])
            if sep:
                options[key].append(value)
                key = None
        elif key is not None:
            options[key].append(arg)
            key = None
        else:
            raise ValueError(f"{arg!r} is neither --option nor the value of one")
    return options


def _runner_of(options: dict[str, list[str]]) -> str:
    """The runner parsed Beam arguments choose: the last `--runner`, else DirectRunner."""
    return (options.get("runner") or ["DirectRunner"])[-1]


def check_beam_args(args: tuple[str, ...] | list[str]) -> str:
    """Validates the Beam arguments a profile gives and returns the runner they choose."""
    options = parse_beam_args(args)
    runner = _runner_of(options)
    if runner not in _BEAM_RUNNERS:
        raise ValueError(f"unknown runner {runner!r} (known: {', '.join(_BEAM_RUNNERS)})")
    missing = [f"--{k}" for k in _BEAM_RUNNERS[runner] if not options.get(k)]
    if missing:
        raise ValueError(f"{runner} needs {', '.join(missing)}")
    direct = sorted(k for k in options if k.startswith("direct_"))
    if runner != "DirectRunner" and direct:
        raise ValueError(f"{', '.join(direct)} only apply to DirectRunner, not {runner}")
    for mode in options.get("direct_running_mode", []):
        if mode not in _DIRECT_MODES:
            raise ValueError(
                f"--direct_running_mode={mode} is not one of {', '.join(_DIRECT_MODES)}"
            )
    for workers in options.get("direct_num_workers", []):
        if not workers.isdigit():
            raise ValueError(f"--direct_num_workers={workers} is not a count (0: every core)")
    if runner == "DataflowRunner":
        for key in ("temp_location", "staging_location"):
            for location in options.get(key, []):
                if not location.startswith("gs://"):
                    raise ValueError(f"--{key}={location} must be a gs:// path")
    return runner


# The runners whose Beam client talks to a job service (Beam's PortableRunner and its kin).
JOB_SERVICE_RUNNERS = ("PortableRunner", "FlinkRunner", "SparkRunner")
# Beam's PortableRunner opens a job's state and message streams with --job_server_timeout as
# their gRPC deadline (60 s unless given), so any Beam stage longer than that fails with
# DEADLINE_EXCEEDED while the job itself goes on (apache/beam#35867). Conveyor gives a stage a
# day; a job service that does not answer is caught before the run instead
# (`checks.check_job_service_reachable`), where the 60 s were meant to catch it.
JOB_SERVICE_TIMEOUT_SECONDS = 24 * 3600


def runner_beam_args(args: tuple[str, ...] | list[str]) -> list[str]:
    """The Beam arguments a run hands Beam: the profile's, plus a day's
    `--job_server_timeout` for a job-service runner when the profile sets none."""
    args = list(args)
    options = parse_beam_args(args)
    if _runner_of(options) in JOB_SERVICE_RUNNERS and "job_server_timeout" not in options:
        args.append(f"--job_server_timeout={JOB_SERVICE_TIMEOUT_SECONDS}")
    return args


class LogFormat(str, enum.Enum):
    """How `conveyor run` and `backfill` write a run's events on the standard output."""

    TEXT = "text"  # aligned lines for people
    JSON = "json"  # one JSON object per event, for log aggregators


class WhenBusy(str, enum.Enum):
    """What a run does when another run of the same pipeline holds the workdir's lock."""

    WAIT = "wait"
    REFUSE = "refuse"


class ConcurrencySpec(StrictModel):
    """One run of a pipeline at a time per workdir: two would pick the same served version and
    share fingerprints and checkpoints. A run holds `<workdir>/runs/<pipeline>/.lock` while it
    runs (a backfill, for all its nights). Locally it is a file the operating system frees when
    its holder dies; in a bucket it is an object held by a lease the holder renews, which another
    machine takes over once it has seen no renewal for `lease_seconds` (docs/storage.md)."""

    when_busy: WhenBusy = Field(
        default=WhenBusy.WAIT,
        description="Another run holds the lock: `wait` for it (up to wait_seconds), or `refuse` "
        "at once. Either way a run that gets no lock exits 75 (try again later).",
    )
    wait_seconds: int = Field(
        default=6 * 3600,
        ge=0,
        description="How long `wait` waits for the lock before giving up.",
    )
    lease_seconds: int = Field(
        default=60,
        ge=2,
        le=3600,
        description="A workdir in a bucket only: how long its lock outlives the last renewal "
        "of a holder that stopped renewing (killed, or cut off from the store). The holder "
        "renews every third of it; a waiting run takes the lock over once it has seen no "
        "renewal for this long, by its own clock. A holder stalled longer than this loses the "
        "lock and stops its run.",
    )
    hold_seconds: int = Field(
        default=24 * 3600,
        ge=60,
        description="Kubeflow only: how long a run's lock counts as held when its exit handler "
        "never released it (a cluster lost mid-run). A Kubeflow run's first task takes the "
        "lock and its exit handler releases it; no task lives through the run to renew it.",
    )


class MetricsSpec(StrictModel):
    """Where each finished run's Prometheus metrics go (pipelines/finish/metrics.py): a
    node-exporter textfile, a Pushgateway, both or neither. A sink that fails is a warning in the
    run's output, never a failed run."""

    textfile_dir: NoParentPath | None = Field(
        default=None,
        description="Folder of node-exporter's textfile collector; each run replaces "
        "`<pipeline>.prom` there atomically. Absolute, or relative to the workdir (for "
        "Kubeflow only relative: an absolute folder would be inside the exit handler's pod).",
    )
    pushgateway_url_env: str | None = Field(
        default=None,
        description="Name of the environment variable holding the Pushgateway's URL (a URL can "
        "carry credentials, so the spec never holds it); nothing is pushed when it is unset or "
        "empty.",
    )
    job: Identifier = Field(
        default="conveyor",
        description="The Pushgateway job the metrics are pushed under (grouped by pipeline).",
    )


_ENDPOINT = re.compile(r"^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?/?$")


def _endpoint(value: str | None) -> str | None:
    if value is not None and not _ENDPOINT.match(value):
        raise ValueError(
            f"endpoint {value!r} is not http(s)://HOST[:PORT]: the URL of the service, without "
            "a path"
        )
    return value.rstrip("/") if value else value


Endpoint = Annotated[str | None, AfterValidator(_endpoint)]


class GcsStorageSpec(StrictModel):
    """How this run reaches gs:// (docs/storage.md). Credentials never come from here: Google's
    application default credentials from the environment (GOOGLE_APPLICATION_CREDENTIALS, the
    metadata server of GCE/GKE/Vertex AI, `gcloud auth application-default login`)."""

    endpoint: Endpoint = Field(
        default=None,
        description="A GCS emulator's URL (http://127.0.0.1:9023); unset: Google Cloud Storage "
        "itself. Given, no Google credentials are looked for or sent.",
    )


class S3StorageSpec(StrictModel):
    """How this run reaches s3:// (docs/storage.md). Credentials never come from here: AWS's own
    chain from the environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, an
    instance or pod role)."""

    endpoint: Endpoint = Field(
        default=None,
        description="An S3-compatible service's URL (MinIO, Ceph, an emulator); unset: AWS S3 "
        "itself.",
    )
    region: Annotated[str, Field(pattern=r"^[a-z0-9]+(-[a-z0-9]+)*$")] | None = Field(
        default=None,
        description="The buckets' region (eu-west-1); unset: what the environment says "
        "(AWS_REGION, AWS_DEFAULT_REGION), else us-east-1.",
    )
    path_style: bool = Field(
        default=False,
        description="Address buckets as ENDPOINT/BUCKET/KEY rather than BUCKET.ENDPOINT/KEY, as "
        "most S3-compatible services need.",
    )


class StorageSpec(StrictModel):
    """How gs:// and s3:// are reached, as `pipelines.core.storage.configure` sets it in a
    process's environment (and so in the processes it starts): every command that loads a spec
    whose paths are in a bucket, or whose profile names an endpoint, calls it (docs/storage.md)."""

    gcs: GcsStorageSpec = Field(default=GcsStorageSpec(), description="Google Cloud Storage.")
    s3: S3StorageSpec = Field(default=S3StorageSpec(), description="S3 and S3-compatible stores.")


# A KFP API server's URL: scheme, host, port and an optional path (a proxy's /pipeline), never
# credentials or a query, which would end up in the spec and in logs.
_KFP_HOST = re.compile(r"^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~-]+)*/?$")


def _kfp_host(value: str | None) -> str | None:
    if value is not None and not _KFP_HOST.match(value):
        raise ValueError(
            f"host {value!r} is not http(s)://HOST[:PORT][/PATH]: the URL of the KFP API "
            "(no user, password or query: a token comes from token_env)"
        )
    return value.rstrip("/") if value else value


class KubeflowSpec(StrictModel):
    """Where `conveyor submit` creates runs: an open-source Kubeflow Pipelines API server, through
    KFP's SDK client (docs/orchestration.md). Credentials never come from here."""

    host: Annotated[str | None, AfterValidator(_kfp_host)] = Field(
        default=None,
        description="The KFP API's URL (https://kubeflow.example.com/pipeline, or "
        "http://127.0.0.1:8888 through `kubectl port-forward`); `conveyor submit --host` "
        "overrides it.",
    )
    token_env: Identifier | None = Field(
        default=None,
        description="Name of the environment variable holding the bearer token sent to the API "
        "(an identity-aware proxy's, a service account's); unset: none is sent.",
    )
    experiment: str | None = Field(
        default=None,
        min_length=1,
        description="The KFP experiment runs and recurring runs are created in (made when "
        "missing); unset: the pipeline's name.",
    )
    namespace: Annotated[str, Field(pattern=_K8S_NAME, max_length=63)] | None = Field(
        default=None,
        description="The user namespace of a multi-user KFP; unset: the client's own context "
        "(single-user KFP needs none).",
    )


class TrainingLauncher(str, enum.Enum):
    """Where the Trainer's replicas run: in the Trainer's own task, or as a job of an operator."""

    LOCAL = "local"  # the Trainer task trains itself
    TFJOB = "tfjob"  # Kubeflow's Training Operator: a TFJob with a chief and workers
    VERTEX = "vertex"  # a Vertex AI custom job with one worker pool per role


class TolerationOperator(str, enum.Enum):
    """How a toleration matches a taint's value."""

    EQUAL = "Equal"
    EXISTS = "Exists"


class TaintEffect(str, enum.Enum):
    """What a Kubernetes taint does to pods that do not tolerate it."""

    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class Toleration(StrictModel):
    """A Kubernetes toleration of the replicas' pods (a GPU node pool's taint, typically)."""

    key: str | None = Field(default=None, description="The taint's key (unset: every key).")
    operator: TolerationOperator = Field(
        default=TolerationOperator.EQUAL,
        description="`Equal` (the key has `value`) or `Exists` (any value).",
    )
    value: str | None = Field(default=None, description="The taint's value, with `Equal`.")
    effect: TaintEffect | None = Field(
        default=None, description="The taint effect tolerated (unset: every effect)."
    )


class TfJobSpec(StrictModel):
    """The TFJob `runtime.training.launcher: tfjob` creates, besides the image and resources."""

    namespace: Annotated[str, Field(pattern=_K8S_NAME, max_length=63)] | None = Field(
        default=None,
        description="Namespace the TFJob is created in; unset: the Trainer task's own.",
    )
    node_selector: dict[str, str] = Field(
        default_factory=dict,
        description="Node labels every replica's pod needs (e.g. "
        "`cloud.google.com/gke-accelerator: nvidia-l4` for the trainer's gpu_type).",
    )
    tolerations: tuple[Toleration, ...] = Field(
        default=(), description="Taints every replica's pod tolerates (a GPU pool's)."
    )


class VertexTrainingSpec(StrictModel):
    """The Vertex AI custom job `runtime.training.launcher: vertex` creates."""

    project: str | None = Field(default=None, description="Google Cloud project of the job.")
    region: Annotated[str, Field(pattern=r"^[a-z]+-[a-z]+[0-9]+$")] | None = Field(
        default=None, description="Vertex AI region, e.g. europe-west4."
    )
    machine_type: str = Field(
        default="n1-standard-8", description="Machine type of each replica (chief and workers)."
    )


class TrainingSpec(StrictModel):
    """How Conveyor's Trainer runs on Kubeflow: in its own task, or launched as a cluster job
    whose replicas train with `trainer.distribution: multi_worker` (docs/orchestration.md). The
    replicas get the trainer's image and its `runtime.container.resources` entry (GPUs included).
    """

    launcher: TrainingLauncher = Field(
        default=TrainingLauncher.LOCAL,
        description="`local` (the Trainer task trains), `tfjob` (a Training Operator TFJob: "
        "chief plus workers) or `vertex` (a Vertex AI custom job); the last two need the "
        "kubeflow orchestrator and `trainer.distribution: multi_worker`.",
    )
    workers: int = Field(
        default=1, ge=1, description="Worker replicas besides the chief (which exports)."
    )
    timeout_seconds: int | None = Field(
        default=None, gt=0, description="The job is stopped and the task fails after this long."
    )
    poll_seconds: float = Field(
        default=30.0, gt=0, description="How often the Trainer task asks for the job's state."
    )
    tfjob: TfJobSpec = Field(default=TfJobSpec(), description="TFJob settings (launcher tfjob).")
    vertex: VertexTrainingSpec = Field(
        default=VertexTrainingSpec(), description="Custom job settings (launcher vertex)."
    )

    @model_validator(mode="after")
    def _vertex_has_a_place(self) -> TrainingSpec:
        if self.launcher is TrainingLauncher.VERTEX:
            missing = [k for k in ("project", "region") if not getattr(self.vertex, k)]
            if missing:
                raise ValueError(f"launcher 'vertex' needs vertex.{' and vertex.'.join(missing)}")
        return self


def missing_image(runtime: RuntimeSpec, target: Orchestrator) -> str | None:
    """Why `target` cannot run without an image when the runtime names none, else None."""
    if target is Orchestrator.KUBEFLOW and not runtime.container.image:
        return (
            "Kubeflow needs the pipeline image (built from the Dockerfile); the profile names none"
        )
    return None


class RuntimeSpec(StrictModel):
    """Where and how a run executes; profiles (Conveyor's and the project's `configs/`) set
    these."""

    enable_cache: bool = Field(
        default=True,
        description="Reuse a node's earlier outputs when its inputs and settings are unchanged "
        "(TFX caching).",
    )
    metadata: MetadataSpec = Field(
        default=MetadataSpec(), description="The ML Metadata store the runs are recorded in."
    )
    beam_args: tuple[str, ...] = Field(
        default=("--direct_running_mode=in_memory", "--direct_num_workers=1"),
        description="Apache Beam pipeline options of the data components (`--runner=...`, "
        "DirectRunner by default); checked for the options each runner needs.",
    )
    alert_webhook_env: str | None = Field(
        default=None,
        description="Name of the environment variable holding a URL that is POSTed a JSON "
        "alert when a run is blocked or fails (nothing is sent when it is unset or empty).",
    )
    metrics: MetricsSpec = Field(
        default=MetricsSpec(),
        description="Prometheus metrics of each finished run: a textfile and/or a Pushgateway.",
    )
    orchestrator: Orchestrator = Field(
        default=Orchestrator.LOCAL,
        description="`local` (conveyor run) or what `conveyor compile` writes: kubeflow, airflow.",
    )
    workdir: str | None = Field(
        default=None,
        description="Working directory a compiled pipeline uses (data, pipeline_root, serving); "
        "e.g. /gcs/BUCKET/conveyor on Vertex AI. Unset: compile's --workdir.",
    )
    container: ContainerSpec = Field(
        default=ContainerSpec(),
        description="The pipeline image and each node's resources (Kubeflow, Vertex AI).",
    )
    kubeflow: KubeflowSpec = Field(
        default=KubeflowSpec(),
        description="The Kubeflow Pipelines API `conveyor submit` creates runs in: its host, "
        "the variable holding its token, the experiment.",
    )
    training: TrainingSpec = Field(
        default=TrainingSpec(),
        description="Where Conveyor's Trainer runs on Kubeflow: in its own task (`local`), or "
        "launched as a Training Operator TFJob or a Vertex AI custom job.",
    )
    concurrency: ConcurrencySpec = Field(
        default=ConcurrencySpec(),
        description="One run of a pipeline at a time per workdir: what a run does while "
        "another holds the lock.",
    )
    storage: StorageSpec = Field(
        default=StorageSpec(),
        description="How gs:// and s3:// are reached: emulator or service endpoints, region, "
        "addressing (never credentials: those come from the environment).",
    )
    log_format: LogFormat = Field(
        default=LogFormat.TEXT,
        description="How `conveyor run` and `backfill` print a run's events: `text` lines, or "
        "`json`, one object per event (component started, finished, cached, failed; gate "
        "decisions; push; the verdict) for log aggregators; `--log-format` overrides it.",
    )

    @field_validator("beam_args")
    @classmethod
    def _beam_args_valid(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        check_beam_args(value)
        return value

    @model_validator(mode="after")
    def _kubeflow_has_an_image(self) -> RuntimeSpec:
        problem = missing_image(self, self.orchestrator)
        if problem:
            raise ValueError(f"orchestrator 'kubeflow' needs container.image: {problem}")
        return self

    @property
    def beam_runner(self) -> str:
        """The Beam runner `beam_args` choose (DirectRunner when they name none)."""
        return check_beam_args(self.beam_args)


_CRON_ALIASES = ("@hourly", "@daily", "@weekly", "@monthly", "@yearly")


class ScheduleSpec(StrictModel):
    """When the nightly run starts: read by `conveyor schedule` (crontab) and the orchestrators."""

    cron: str = Field(default="0 2 * * *", description="Five cron fields, or @daily and kin.")
    start_date: datetime.date | None = Field(
        default=None, description="First night the orchestrators schedule."
    )
    catchup: bool = Field(default=False, description="Orchestrators run missed nights.")
    timezone: str = Field(
        default="UTC",
        description="IANA time zone (e.g. Europe/Berlin) the cron fires in and in which "
        "`--date yesterday` is yesterday.",
    )

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        import zoneinfo

        try:
            zoneinfo.ZoneInfo(value)
        except (ValueError, zoneinfo.ZoneInfoNotFoundError):  # ValueError: a path, not a name
            raise ValueError("not an IANA time zone name such as UTC or Europe/Berlin") from None
        return value

    @field_validator("cron")
    @classmethod
    def _cron_form(cls, value: str) -> str:
        if value.strip() in _CRON_ALIASES:
            return value.strip()
        fields = value.split()
        field_chars = re.compile(r"^[0-9*/,\-A-Za-z]+$")
        if len(fields) != 5 or not all(field_chars.match(f) for f in fields):
            raise ValueError(
                f"cron {value!r} needs five fields (minute hour day month weekday) or one of "
                f"{', '.join(_CRON_ALIASES)}"
            )
        try:  # croniter is what Airflow parses schedules with
            from croniter import croniter
        except ImportError:  # pragma: no cover - installed with Airflow from the lock
            croniter = None
        if croniter is not None and not croniter.is_valid(" ".join(fields)):
            raise ValueError(f"cron {value!r} is not a schedule Airflow (croniter) can parse")
        return " ".join(fields)


# The reference chain; a spec's `components` may reorder, drop or repeat these types.
DEFAULT_COMPONENTS = (
    "csv_example_gen",
    "statistics_gen",
    "schema_gen",
    "example_validator",
    "data_gate",
    "trainer",
    "baseline_resolver",
    "evaluator",
    "infra_validator",
    "pusher",
)


# A team's TFX component by import path, `package.module.Name` (read at validation, never run).
ComponentPath = Annotated[
    str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")
]
# What an input reads: `node_id.output_name`, or a role (the last earlier node providing it).
ChannelReference = Annotated[
    str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$")
]


class ComponentRef(StrictModel):
    """One node of the pipeline: a registered component `type`, or a team's TFX `component` by
    import path, and the node id it runs under (see docs/user-code.md#custom-components)."""

    type: str | None = Field(
        default=None,
        description="A registered component type (the table in pipelines/spec/components.py); "
        "or give `component`.",
    )
    component: ComponentPath | None = Field(
        default=None,
        description="A team's TFX component instead of a `type`: a component class or an "
        "`@component` function, by import path (`my_team.components.FilterExamples`). Its "
        "inputs, outputs and parameters are read from its source at validation, without "
        "running it.",
    )
    id: Identifier | None = Field(
        default=None,
        description="Node id, unique in the pipeline (default: the type; required with "
        "`component`); lets a type appear twice.",
    )
    params: dict[Identifier, Any] = Field(
        default_factory=dict,
        description="`component`: its execution parameters, by name.",
    )
    inputs: dict[Identifier, ChannelReference] = Field(
        default_factory=dict,
        description="Input name -> `node_id.output_name` of an earlier node (a built-in's "
        "outputs are named after the roles it provides: `csv_example_gen.examples`), or a role "
        "(the last earlier node providing it). Required for a `component`'s inputs; for a "
        "`type`, overrides the role it would read.",
    )
    provides: dict[Identifier, Identifier] = Field(
        default_factory=dict,
        description="`component`: role -> output name, publishing the output under the role "
        "for the nodes after it (`examples: filtered` makes the Trainer read it).",
    )

    @field_validator("type")
    @classmethod
    def _registered(cls, value: str | None) -> str | None:
        if value is not None and value not in KNOWN_TYPES:
            raise ValueError(f"unknown component type {value!r} (known: {', '.join(KNOWN_TYPES)})")
        return value

    @model_validator(mode="after")
    def _default_id(self) -> ComponentRef:
        if (self.type is None) == (self.component is None):
            raise ValueError(
                "a components[] entry names a registered `type` or a team's `component` (by "
                "import path), exactly one of them"
            )
        if self.component is not None:
            if self.id is None:
                raise ValueError(f"component {self.component!r} needs an `id` (its node id)")
            return self
        for key in ("params", "provides"):
            if getattr(self, key):
                raise ValueError(
                    f"`{key}` is for a team's `component`; a `type` {self.type!r} takes its "
                    "settings from the spec's sections and provides the roles of its table row"
                )
        if self.id is None:
            object.__setattr__(self, "id", self.type)
        return self


class InferenceFormat(str, enum.Enum):
    """The table batch inference writes beside its PredictionLogs (`inference.output_format`)."""

    CSV = "csv"
    PARQUET = "parquet"


class InferenceSpec(StrictModel):
    """Batch inference: what a `bulk_inferrer` component and `conveyor infer` read and write
    (docs/batch-inference.md)."""

    splits: tuple[Identifier, ...] = Field(
        default=(),
        description="The splits of the span's examples a `bulk_inferrer` component predicts "
        "(TFX's DataSpec.example_splits); empty: every split. `conveyor infer` reads the span's "
        "input files whole.",
    )
    signature: Identifier = Field(
        default="serving_examples",
        description="The SavedModel signature called on serialized tf.Examples: a predict, "
        "classify or regress signature with one string input (TFX's ModelSpec).",
    )
    output_columns: tuple[str, ...] = Field(
        default=(),
        description="Input columns written beside each prediction as a table "
        "(`output_format`), next to the PredictionLog TFRecords; empty: PredictionLogs only.",
    )
    output_format: InferenceFormat = Field(
        default=InferenceFormat.CSV,
        description="`csv` or `parquet`: the table's format.",
    )


class Retune(str, enum.Enum):
    """When a night runs the Tuner; on the other nights the Trainer reuses the last tuned
    hyperparameters ML Metadata holds."""

    ALWAYS = "always"
    WEEKLY = "weekly"
    REUSE = "reuse"


class Weekday(str, enum.Enum):
    """A day of the week, as `tuning.weekday` names it."""

    MONDAY = "monday"
    TUESDAY = "tuesday"
    WEDNESDAY = "wednesday"
    THURSDAY = "thursday"
    FRIDAY = "friday"
    SATURDAY = "saturday"
    SUNDAY = "sunday"


class ObjectiveDirection(str, enum.Enum):
    """Whether the tuner's objective is better higher (`max`) or lower (`min`)."""

    MAX = "max"
    MIN = "min"


# The generic trainer's hyperparameters a `tuning.search_space` may name, with the kind of
# value each takes. batch_size is not among them: the datasets are built once per search.
TUNABLE_HYPERPARAMETERS = {
    "learning_rate": "float",
    "dropout": "float",
    "hidden_units": "layers",
}


LAYERS_SEPARATOR = ","  # hidden_units travel as "16,8": KerasTuner's choices are scalars


def encode_layers(units) -> str:
    """hidden_units as a KerasTuner choice holds them and a trial records them ("32,16"): the
    tuner's search space, the Trainer reading the best back and the report all spell it so."""
    return LAYERS_SEPARATOR.join(str(int(u)) for u in units)


class SearchDimension(StrictModel):
    """One hyperparameter's values to try: `choices`, or a float range `min`..`max`."""

    choices: tuple[Any, ...] = Field(
        default=(),
        description="The values to try (learning_rate, dropout: numbers; hidden_units: lists "
        "of layer widths).",
    )
    min: float | None = Field(default=None, description="A float range's lower end.")
    max: float | None = Field(default=None, description="A float range's upper end.")
    sampling: str = Field(
        default="linear",
        pattern=r"^(linear|log)$",
        description="How a range is sampled: `linear` or `log` (a learning rate, say).",
    )

    @model_validator(mode="after")
    def _choices_or_range(self) -> SearchDimension:
        ranged = self.min is not None or self.max is not None
        if bool(self.choices) == ranged:
            raise ValueError(
                "give either `choices` (a list of values) or a range (`min` and `max`), not "
                "both and not neither"
            )
        if ranged:
            if self.min is None or self.max is None or not self.min < self.max:
                raise ValueError(f"a range needs min < max, got min {self.min}, max {self.max}")
            if self.sampling == "log" and self.min <= 0:
                raise ValueError("`sampling: log` needs min above 0")
        return self


class TuningSpec(StrictModel):
    """What a `tuner` component searches, how long, and on which nights
    (docs/training.md#tuning)."""

    search_space: dict[str, SearchDimension] = Field(
        default_factory=dict,
        description="Conveyor's trainer: hyperparameter -> the values to try (learning_rate, "
        "dropout, hidden_units); the trainer's own value must be among them, as the first "
        "trial measures it. A `trainer.module` with `tuner_fn` defines its own space: leave "
        "this empty.",
    )
    objective: str = Field(
        default="val_loss",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="The Keras metric a trial is scored by (`val_loss`, `val_accuracy`...).",
    )
    direction: ObjectiveDirection | None = Field(
        default=None,
        description="`max` or `min` (unset: `min` for a loss or an error, else `max`).",
    )
    max_trials: int = Field(default=5, gt=0, le=100, description="Trials in one search.")
    trial_steps: int = Field(
        default=100, gt=0, description="The budget: training steps of each trial."
    )
    retune: Retune = Field(
        default=Retune.ALWAYS,
        description="`always` (every night tunes), `weekly` (nights on `weekday` tune) or "
        "`reuse` (no night tunes on schedule): a night that does not tune reuses the last "
        "tuned hyperparameters in ML Metadata; one with none there tunes (docs/training.md).",
    )
    weekday: Weekday = Field(
        default=Weekday.MONDAY, description="The night `retune: weekly` tunes on."
    )
    retune_on_schema_change: bool = Field(
        default=True,
        description="A night that would reuse tunes instead when the schema it trains under "
        "differs from the one the last search read (a column added, dropped or retyped).",
    )

    @field_validator("search_space")
    @classmethod
    def _known_hyperparameters(cls, space: dict[str, SearchDimension]):
        for name, dimension in space.items():
            kind = TUNABLE_HYPERPARAMETERS.get(name)
            if kind is None:
                raise ValueError(
                    f"{name!r} is not a hyperparameter of Conveyor's trainer (tunable: "
                    f"{', '.join(TUNABLE_HYPERPARAMETERS)})"
                )
            if kind == "layers":
                good = dimension.choices and all(
                    isinstance(c, list | tuple)
                    and c
                    and all(isinstance(w, int) and not isinstance(w, bool) and w > 0 for w in c)
                    for c in dimension.choices
                )
                if not good:
                    raise ValueError(
                        f"{name}: give `choices`, each a list of positive layer widths "
                        "(e.g. [[16, 8], [32, 16]])"
                    )
            elif dimension.choices and not all(
                isinstance(c, int | float) and not isinstance(c, bool) for c in dimension.choices
            ):
                raise ValueError(f"{name}: every choice must be a number")
        return space

    @property
    def objective_direction(self) -> ObjectiveDirection:
        """`direction`, or the one the objective's name implies."""
        if self.direction is not None:
            return self.direction
        lower = ("loss", "error")
        return ObjectiveDirection.MIN if self.objective.endswith(lower) else ObjectiveDirection.MAX


class TransformSpec(StrictModel):
    """TFX Transform with the team's `preprocessing_fn` (enabled by a `transform` component)."""

    module: ModulePath = Field(
        description="Module that defines `preprocessing_fn(inputs)`, by import path."
    )


class PipelineSpec(StrictModel):
    """A whole pipeline definition, as validated from YAML."""

    name: Identifier = Field(
        description="Pipeline name: the TFX pipeline's name, and by convention the spec's "
        "file name (specs/NAME.yaml)."
    )
    description: str = Field(default="", description="One line `conveyor list` shows.")
    data: DataSpec = Field(description="The input data, its splits and spans, and the data gate.")
    schema_: SchemaSpec = Field(
        default=SchemaSpec(),
        alias="schema",
        description="The schema the data is checked against (curated file or inferred).",
    )
    trainer: TrainerSpec = Field(description="The model and its training.")
    transform: TransformSpec | None = Field(
        default=None,
        description="TFX Transform's user module; needs a `transform` component and a "
        "`trainer.module` with `run_fn` (unset: statistics-driven preprocessing in the trainer).",
    )
    evaluation: EvaluationSpec = Field(description="The model gate: metrics and thresholds.")
    push: PushSpec = Field(description="Where a blessed model is published for TF Serving.")
    inference: InferenceSpec = Field(
        default=InferenceSpec(),
        description="Batch inference: the splits, signature and table of a `bulk_inferrer` "
        "component and of `conveyor infer`.",
    )
    tuning: TuningSpec | None = Field(
        default=None,
        description="Hyperparameter tuning by a `tuner` component: the search space, "
        "objective, trials, budget and which nights tune (docs/training.md#tuning).",
    )
    components: tuple[ComponentRef, ...] = Field(
        default_factory=lambda: tuple(ComponentRef(type=t) for t in DEFAULT_COMPONENTS),
        description="The pipeline's nodes, in order; each may only need what an earlier one "
        "provides (default: the reference chain).",
    )
    runtime: RuntimeSpec = Field(
        default=RuntimeSpec(),
        description="Where and how runs execute; profiles usually set this.",
    )
    schedule: ScheduleSpec = Field(
        default=ScheduleSpec(), description="When the nightly run starts."
    )

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _tflite_converter_in_the_chain(self) -> PipelineSpec:
        # Defined first, so the checks below see the chain as it runs. `push.tflite.enabled` is
        # the one switch: a chain without a converter (the reference one, or a listed one)
        # gains it just before its Pusher; listing it places it (and names its id) explicitly.
        types = [c.type for c in self.components]
        if self.push.tflite.enabled and "tflite_converter" not in types:
            at = types.index("pusher") if "pusher" in types else len(types)
            chain = list(self.components)
            chain.insert(at, ComponentRef(type="tflite_converter"))
            object.__setattr__(self, "components", tuple(chain))
        elif "tflite_converter" in types and not self.push.tflite.enabled:
            raise ValueError(
                "a `tflite_converter` component needs push.tflite.enabled: true (and takes its "
                "settings from push.tflite)"
            )
        return self

    @model_validator(mode="after")
    def _unique_node_ids(self) -> PipelineSpec:
        ids = [c.id for c in self.components]
        repeated = sorted({i for i in ids if ids.count(i) > 1})
        if repeated:
            raise ValueError(f"components: node ids must be unique, repeated: {repeated}")
        return self

    @model_validator(mode="after")
    def _components_are_wired(self) -> PipelineSpec:
        from pipelines.spec.custom_components import signatures_of

        signatures, problem = signatures_of(self.components)
        problem = problem or check_wiring(self.components, self, signatures)
        if problem:
            raise ValueError(problem)
        # Earlier spans join the window once their night's model is blessed: no evaluator, none.
        if self.data.window_spans > 1 and "evaluator" not in {c.type for c in self.components}:
            raise ValueError("data.window_spans above 1 needs an `evaluator` in `components`")
        return self

    @model_validator(mode="after")
    def _transform_is_wired(self) -> PipelineSpec:
        listed = "transform" in {c.type for c in self.components}
        if listed and self.transform is None:
            raise ValueError("a `transform` component needs `transform.module`")
        if self.transform is not None and not listed:
            raise ValueError("`transform` is set: list a `transform` component in `components`")
        if self.transform is not None and self.trainer.module is None:
            raise ValueError(
                "`transform` needs `trainer.module` with a `run_fn`: Conveyor's own trainer "
                "reads raw columns, not Transform's output"
            )
        return self

    @model_validator(mode="after")
    def _tuner_is_wired(self) -> PipelineSpec:
        listed = "tuner" in {c.type for c in self.components}
        if listed and self.tuning is None:
            raise ValueError(
                "a `tuner` component needs a `tuning` block: its search_space (Conveyor's "
                "trainer), objective, max_trials, trial_steps and retune"
            )
        if self.tuning is not None and not listed:
            raise ValueError("`tuning` is set: list a `tuner` component before the trainer")
        if self.tuning is None:
            return self
        if self.trainer.module is None and not self.tuning.search_space:
            raise ValueError(
                "tuning.search_space is empty: name at least one of Conveyor's trainer's "
                f"hyperparameters to search ({', '.join(TUNABLE_HYPERPARAMETERS)})"
            )
        for name, dimension in self.tuning.search_space.items():
            value = getattr(self.trainer, name)
            if name == "hidden_units":
                inside = list(value) in [list(c) for c in dimension.choices]
            elif dimension.choices:
                inside = any(abs(float(c) - float(value)) < 1e-12 for c in dimension.choices)
            else:
                inside = dimension.min <= value <= dimension.max
            if not inside:
                raise ValueError(
                    f"tuning.search_space.{name}: the trainer's own value {value!r} "
                    f"(trainer.{name}) is not among the values searched; add it, as the first "
                    "trial measures the spec's setting and the search must beat it"
                )
        return self

    @model_validator(mode="after")
    def _slices_are_columns(self) -> PipelineSpec:
        known = {f.name for f in self.trainer.features}
        for columns in self.evaluation.slices:
            unknown = [c for c in columns if c not in known]
            if unknown:
                raise ValueError(
                    f"evaluation.slices names {unknown}, which are not trainer features "
                    f"({sorted(known)})"
                )
        return self

    @model_validator(mode="after")
    def _gated_columns_are_known(self) -> PipelineSpec:
        known = {f.name for f in self.trainer.features} | {self.trainer.label}
        for section in ("drift", "skew"):
            unknown = sorted(set(getattr(self.data, section)) - known)
            if unknown:
                raise ValueError(
                    f"data.{section} names {unknown}, which are neither trainer features nor "
                    f"the label ({sorted(known)})"
                )
        return self

    def to_yaml_dict(self) -> dict:
        """The resolved spec as plain data, keyed as in the YAML files."""
        return self.model_dump(mode="json", by_alias=True)
