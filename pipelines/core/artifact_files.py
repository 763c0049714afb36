"""Names of what components write that other layers read back, each named once.

The run's finish, the local runner and the history page read a data gate's findings and a
trainer's summary without importing the component that wrote them (which imports TFX and
TensorFlow), so the names live on the floor under both.
"""

DATA_GATE_TYPE = "data_gate"  # the spec's component type of the data gate
GATE_FINDINGS_KEY = "findings"  # the data gate's output key: TFX names its folder after it
GATE_FINDINGS_FILE = "findings.json"  # what the data gate writes in that folder
# What a data gate that stopped a Kubeflow run writes into the run's folder, where the exit
# handler finds it by the job's name (a failed task publishes no artifact).
GATE_VERDICT_FILE = "data_gate_verdict.json"
# What a Pusher on Kubeflow writes into the run's folder the same way: its decision, the
# model, blessing and inputs it judged, which the exit handler records in Conveyor's ML
# Metadata store (pipelines/core/metadata/told_push.py) for lineage, models, rollback and bless.
PUSH_DECISION_FILE = "push_decision.json"
TRAINING_SUMMARY_FILE = "training_summary.json"  # the trainer's summary in its ModelRun folder
# Where a data gate on Kubeflow records each span it accepted (`<span>.json`: the span's
# statistics and examples), under the pipeline's folder of run folders: the drift baseline of
# the next night's gate, which Kubeflow's own resolvers cannot find.
ACCEPTED_SPANS_FOLDER = "accepted_spans"
# Where a data gate on Kubeflow with `schema.source: infer` records the schema it passed the
# data against, under the same folder: the last accepted run's schema, which the next run's
# schema_gen keeps (components/accepted_schema).
ACCEPTED_SCHEMA_FILE = "accepted_schema.json"
# What a Kubeflow run's first task (pipelines/run/kubeflow_start.py) found of the run's inputs,
# in the run's folder, where the exit handler reads it: {span, fingerprint, unchanged: the
# record of the last final run with the same fingerprint, or null}.
RUN_INPUTS_FILE = "run_inputs.json"
# ... and the custom property of its output artifact the run's other tasks' condition reads.
INPUTS_PROPERTY = "inputs"
INPUTS_CHANGED, INPUTS_UNCHANGED = "changed", "unchanged"
# The job's runtime parameter that makes that task run an unchanged night ("true";
# `conveyor submit --force` sets it, without importing TFX).
FORCE_PARAMETER = "force"
# The files of a model server's request log (pipelines/serving/model_server/request_log.py):
# PredictionLog records, which the data gate reads as serving data (components/data_gate).
REQUEST_LOG_SUFFIX = ".tfrecord"
