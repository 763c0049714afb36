"""Kubeflow's schema_gen for `schema.source: infer`: the last accepted run's schema, else one
inferred from tonight's statistics.

Locally an inferring pipeline infers once and then keeps what it inferred: the builder reads
the last accepted run's schema from ML Metadata and imports it (pipelines/builder/nodes/
schema_gen.py), so a column that disappears, turns to text or gains a category is an anomaly,
not inferred into the schema. A Kubeflow job is compiled once and its tasks cannot read KFP's
store, so the choice moves into this task, with a record in the workdir every task reaches:

- the data gate, on passing the data, writes the schema it held the data to into
  `<runs dir>/accepted_schema.json` (`record_accepted_schema`): the last accepted run's schema;
- this component copies that schema into its output, or, before any run was accepted,
  infers one as TFX's SchemaGen does (its executor, unchanged).

KFP's cache is off for this task (pipelines/run/kubeflow.py): its answer depends on the record.
"""

from __future__ import annotations

import json
import os

from absl import logging
from tfx import types
from tfx.components.schema_gen import component as schema_gen_component
from tfx.components.schema_gen import executor as schema_gen_executor
from tfx.dsl.components.base import base_component, executor_spec
from tfx.dsl.io import fileio
from tfx.types import artifact_utils, standard_artifacts, standard_component_specs
from tfx.types.component_spec import ExecutionParameter
from tfx.utils import io_utils, json_utils

# The execution property naming the record's file.
ACCEPTED_SCHEMA_KEY = "accepted_schema_file"
# On the Schema: the accepted schema's URI it was copied from ("" when inferred).
SCHEMA_FROM_PROPERTY = "conveyor_schema_from"


def record_accepted_schema(record_file: str, schema) -> str:
    """Records `schema` (the Schema artifact a data gate passed the data against) as the last
    accepted run's schema; returns the record's file."""
    fileio.makedirs(os.path.dirname(record_file))
    with fileio.open(record_file, "w") as handle:
        handle.write(json.dumps({"uri": schema.uri}, indent=2))
    return record_file


def accepted_schema_uri(record_file: str) -> str | None:
    """The URI of the last accepted run's schema, or None when no run was accepted yet."""
    if not fileio.exists(record_file):
        return None
    with fileio.open(record_file) as handle:
        return json.loads(handle.read())["uri"]


class AcceptedSchemaGenSpec(standard_component_specs.SchemaGenSpec):
    """TFX's SchemaGenSpec plus the record of the last accepted run's schema."""

    PARAMETERS = {
        **standard_component_specs.SchemaGenSpec.PARAMETERS,
        ACCEPTED_SCHEMA_KEY: ExecutionParameter(type=str),
    }


class Executor(schema_gen_executor.Executor):
    """Copies the last accepted run's schema; infers as TFX's SchemaGen before there is one."""

    def Do(self, input_dict, output_dict, exec_properties):  # noqa: N802 - TFX's name
        """Writes the output Schema from the record's schema, or TFX's inference of it."""
        exec_properties = dict(exec_properties)
        source = accepted_schema_uri(exec_properties.pop(ACCEPTED_SCHEMA_KEY))
        schema = artifact_utils.get_single_instance(
            output_dict[standard_component_specs.SCHEMA_KEY]
        )
        if source is None:
            logging.info("No run accepted yet: the schema is inferred from these statistics.")
            super().Do(input_dict, output_dict, exec_properties)
            schema.set_string_custom_property(SCHEMA_FROM_PROPERTY, "")
            return
        logging.info("The schema of the last accepted run: %s", source)
        io_utils.copy_file(
            io_utils.get_only_uri_in_dir(source),
            os.path.join(schema.uri, schema_gen_executor.DEFAULT_FILE_NAME),
            overwrite=True,
        )
        schema.set_string_custom_property(SCHEMA_FROM_PROPERTY, source)


class AcceptedSchemaGen(schema_gen_component.SchemaGen):
    """TFX's SchemaGen (same input and output) that keeps the last accepted run's schema."""

    SPEC_CLASS = AcceptedSchemaGenSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

    def __init__(
        self,
        statistics: types.BaseChannel,
        accepted_schema_file: str,
        infer_feature_shape: bool = False,
    ):
        """Builds the spec as TFX's SchemaGen does, with the record's file. TFX's own
        __init__ is not called: it builds TFX's SchemaGenSpec, which has no place for it."""
        spec = AcceptedSchemaGenSpec(
            statistics=statistics,
            infer_feature_shape=int(infer_feature_shape),
            exclude_splits=json_utils.dumps([]),
            schema=types.Channel(type=standard_artifacts.Schema),
            **{ACCEPTED_SCHEMA_KEY: accepted_schema_file},
        )
        base_component.BaseComponent.__init__(self, spec=spec)
