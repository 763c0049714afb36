"""Reading Conveyor's runs back from ML Metadata, with ml_metadata alone (no TFX, no TensorFlow).

One module per question:

- `connection`: the store a profile's `runtime.metadata` describes (`connection_config`,
  `open_store`, the MySQL password from the environment).
- `runs`: one run, the latest runs, and many runs at once for the history page.
- `lineage`: the versions a pipeline pushed and what produced each.
- `artifacts`: one run's nodes and the artifacts they read and wrote, for reports.
- `schemas`: the schema of the last accepted run, for `schema.source: infer`.
- `tuning`: the Tuner's last search, for a night `tuning.retune` does not tune.
- `records`: how TFX records a run (context and artifact type names, execution states) and
  the small readers the others share.

The names below are the API: `from pipelines.core import metadata; metadata.list_runs(...)`.
This floor imports nothing of Conveyor's above `pipelines.core`.
"""

from pipelines.core.metadata.artifacts import (
    ArtifactRecord,
    NodeArtifacts,
    find_output,
    read_run_artifacts,
    statistics_file,
)
from pipelines.core.metadata.connection import (
    MetadataConfigError,
    connection_config,
    metadata_password,
    open_store,
)
from pipelines.core.metadata.lineage import PushLineage, pushed_lineage, successful_pushes
from pipelines.core.metadata.records import (
    EVALUATION_TYPE,
    EXAMPLES_TYPE,
    GATE_FINDINGS_TYPE,
    HYPERPARAMETERS_TYPE,
    LEGACY_RUN_CONTEXT_TYPE,
    MODEL_TYPE,
    NODE_CONTEXT_TYPE,
    PUSHED_MODEL_TYPE,
    RUN_CONTEXT_TYPE,
    SCHEMA_TYPE,
    STATE_NAMES,
    STATISTICS_TYPE,
    custom_property,
    node_context_type_id,
    node_id_of,
    run_context,
)
from pipelines.core.metadata.runs import (
    BASELINE_METRIC_PREFIX,
    METRIC_PREFIX,
    TRAINING_METRIC_PREFIX,
    NodeRecord,
    RunHistory,
    RunRecord,
    find_run,
    list_runs,
    run_history,
    run_record,
)
from pipelines.core.metadata.schemas import (
    SCHEMA_FILE,
    SCHEMA_FILE_PROPERTY,
    AcceptedSchema,
    last_accepted_schema,
)
from pipelines.core.metadata.tuning import LastTuning, last_tuning

__all__ = [
    "BASELINE_METRIC_PREFIX",
    "EVALUATION_TYPE",
    "EXAMPLES_TYPE",
    "GATE_FINDINGS_TYPE",
    "HYPERPARAMETERS_TYPE",
    "LEGACY_RUN_CONTEXT_TYPE",
    "METRIC_PREFIX",
    "MODEL_TYPE",
    "NODE_CONTEXT_TYPE",
    "PUSHED_MODEL_TYPE",
    "RUN_CONTEXT_TYPE",
    "SCHEMA_FILE",
    "SCHEMA_FILE_PROPERTY",
    "SCHEMA_TYPE",
    "STATE_NAMES",
    "STATISTICS_TYPE",
    "TRAINING_METRIC_PREFIX",
    "AcceptedSchema",
    "ArtifactRecord",
    "MetadataConfigError",
    "LastTuning",
    "NodeArtifacts",
    "NodeRecord",
    "PushLineage",
    "RunHistory",
    "RunRecord",
    "connection_config",
    "custom_property",
    "find_output",
    "find_run",
    "last_accepted_schema",
    "last_tuning",
    "list_runs",
    "metadata_password",
    "node_context_type_id",
    "node_id_of",
    "open_store",
    "pushed_lineage",
    "read_run_artifacts",
    "run_context",
    "run_history",
    "run_record",
    "statistics_file",
    "successful_pushes",
]
