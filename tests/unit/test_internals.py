"""Guards on the private TensorFlow, TFX, TFMA, TFDV and Beam internals Conveyor uses.

docs/internals.md lists each internal: where Conveyor uses it, what it buys, the public
alternative considered and which test here guards it. A test fails when its internal is gone
or changed shape (module path, name, parameters, attributes), naming what changed and where
Conveyor uses it, so that an upgrade cannot silently switch a guarded path to its fallback.

Most tests read the installed libraries' source with `ast` and import none of them. The
serving internals are checked by calling them on a small loaded SavedModel, which imports
TensorFlow: the file's one heavy import and nearly all of its run time (the rest takes about
a second).
"""

from __future__ import annotations

import ast
import functools
import gc
import hashlib
import importlib.metadata
import importlib.util
import inspect
import re
from pathlib import Path

import numpy as np
import pytest

from pipelines.core.paths import FRAMEWORK_ROOT

DISTRIBUTIONS = {
    "tensorflow": "tensorflow",
    "tfx": "tfx",
    "tensorflow_model_analysis": "tensorflow-model-analysis",
    "tensorflow_data_validation": "tensorflow-data-validation",
    "tfx_bsl": "tfx-bsl",
    "apache_beam": "apache-beam",
}


def _changed(name: str, where: str) -> str:
    """The failure message: what changed (`name` starts with its package's dotted name), in
    which installed version, and where Conveyor uses it."""
    package = re.split(r"[.\s(]", name.removeprefix("module "))[0]
    distribution = DISTRIBUTIONS.get(package, package)
    try:
        version = importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        version = "(not installed)"
    return (
        f"{name} changed or is gone in the installed {distribution} {version}; Conveyor uses "
        f"it in {where}. docs/internals.md says why and the public alternative considered."
    )


def _module_file(dotted: str) -> Path | None:
    """The source file (or compiled extension) of an installed module, found without
    importing it or its packages."""
    top, *rest = dotted.split(".")
    spec = importlib.util.find_spec(top)  # a top-level name: nothing is imported
    if spec is None:
        return None
    base = Path(spec.submodule_search_locations[0]).joinpath(*rest)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    if base.is_dir():  # a namespace package (tfx.proto): its names are its modules
        return base
    return next(base.parent.glob(f"{base.name}.*.so"), None)


@functools.cache
def _tree(dotted: str) -> ast.Module:
    path = _module_file(dotted)
    assert path is not None and path.suffix == ".py", _changed(f"module {dotted}", "?")
    return ast.parse(path.read_text())


def _top_level(tree: ast.Module, name: str) -> ast.AST | None:
    """The module-level def, class or assignment of `name` (inside if/try blocks too)."""
    for node in _module_statements(tree.body):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if node.name == name:
                return node
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return node
        elif isinstance(node, ast.Import | ast.ImportFrom):
            if any((a.asname or a.name).split(".")[0] == name for a in node.names):
                return node
    return None


def _module_statements(body: list[ast.stmt]):
    for node in body:
        yield node
        if isinstance(node, ast.If | ast.Try):
            children = [*node.body, *node.orelse]
            children += [s for h in getattr(node, "handlers", []) for s in h.body]
            yield from _module_statements(children)


def _definition(module: str, name: str, where: str) -> ast.AST:
    """`module.name` (a dotted `Class.method` too), asserted present."""
    head, *rest = name.split(".")
    node = _top_level(_tree(module), head)
    for part in rest:
        node = next(
            (
                child
                for child in getattr(node, "body", [])
                if isinstance(child, ast.FunctionDef | ast.ClassDef) and child.name == part
            ),
            None,
        )
    assert node is not None, _changed(f"{module}.{name}", where)
    return node


def _parameters(function: ast.FunctionDef) -> list[str]:
    """A def's parameter names, without `self`."""
    arguments = function.args
    names = [a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]]
    return names[1:] if names[:1] == ["self"] else names


def _self_attributes(cls: ast.ClassDef) -> set[str]:
    """The `self.<name>` attributes a class's methods assign."""
    return {
        target.attr
        for node in ast.walk(cls)
        if isinstance(node, ast.Assign | ast.AnnAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Attribute)
        and isinstance(target.value, ast.Name)
        and target.value.id == "self"
    }


def _conveyor_constant(relative: str, name: str) -> str:
    """A module-level string constant of Conveyor's own code, read without importing it."""
    node = _top_level(ast.parse((FRAMEWORK_ROOT / relative).read_text()), name)
    assert isinstance(node, ast.Assign), f"{relative} no longer assigns {name}"
    value = node.value
    if isinstance(value, ast.Call):  # re.compile(r"...")
        value = value.args[0]
    return ast.literal_eval(value)


# --- TensorFlow: the model server's signature call (pipelines/serving/model_server/servable.py)

SERVABLE = "pipelines/serving/model_server/servable.py"


@pytest.fixture(scope="module")
def loaded_signature(tmp_path_factory):
    """A signature as the model server loads it: keyword inputs, a captured variable, a dict of
    outputs."""
    import tensorflow as tf

    class Doubler(tf.Module):
        def __init__(self):
            super().__init__()
            self.factor = tf.Variable(2.0)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
        def double(self, x):
            return {"y": x * self.factor}

    module = Doubler()
    path = tmp_path_factory.mktemp("internals") / "1"
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.double})
    return tf.saved_model.load(str(path)).signatures["serving_default"]


def _flat_inputs():
    import tensorflow as tf

    return [tf.constant([1.0, 3.0])]


def test_concrete_function_call_flat(loaded_signature):
    where = f"{SERVABLE} (Signature._call_tensors, _first_call)"
    call_flat = getattr(loaded_signature, "_call_flat", None)
    # Signature._flat_input_specs falls back to the structured call without it: assert it here.
    assert call_flat is not None, _changed("tensorflow ConcreteFunction._call_flat", where)
    parameters = list(inspect.signature(call_flat).parameters)
    # (tensor inputs, captured inputs): a loaded function names the first `args`.
    assert len(parameters) == 2 and parameters[1] == "captured_inputs", _changed(
        f"tensorflow ConcreteFunction._call_flat{tuple(parameters)}", where
    )
    outputs = call_flat(_flat_inputs(), loaded_signature.captured_inputs)
    assert sorted(outputs) == ["y"], _changed(
        "tensorflow ConcreteFunction._call_flat's outputs", where
    )
    np.testing.assert_allclose(outputs["y"].numpy(), [2.0, 6.0])


def test_concrete_function_captured_inputs(loaded_signature):
    captures = getattr(loaded_signature, "_captured_inputs", None)
    # Signature._fixed_captures reads captured_inputs on every call without it.
    assert captures is not None and len(captures) == len(loaded_signature.captured_inputs), (
        _changed("tensorflow ConcreteFunction._captured_inputs", f"{SERVABLE} (_fixed_captures)")
    )


def test_concrete_function_inference_function(loaded_signature):
    where = f"{SERVABLE} (_FunctionOp.of)"
    atomic = getattr(loaded_signature, "_inference_function", None)
    # _FunctionOp.of returns None without it, and every request takes the slower call.
    assert atomic is not None, _changed("tensorflow ConcreteFunction._inference_function", where)
    for path in ("function_type.flat_outputs", "cached_definition.signature.input_arg", "name"):
        value = atomic
        for attribute in path.split("."):
            value = getattr(value, attribute, None)
        assert value is not None, _changed(f"tensorflow AtomicFunction.{path}", where)


def test_stateful_partitioned_call_executed_directly(loaded_signature):
    from tensorflow.python.eager import context, execute

    from pipelines.serving.model_server.servable import _FunctionOp

    where = f"{SERVABLE} (_FunctionOp)"
    parameters = list(inspect.signature(execute.execute).parameters)
    assert parameters[:5] == ["op_name", "num_outputs", "inputs", "attrs", "ctx"], _changed(
        f"tensorflow.python.eager.execute.execute{tuple(parameters)}", where
    )
    options = context.context().function_call_options
    assert isinstance(options.config_proto_serialized, bytes), _changed(
        "tensorflow.python.eager.context FunctionCallOptions.config_proto_serialized", where
    )
    captured = list(loaded_signature.captured_inputs)
    op = _FunctionOp.of(loaded_signature, captured)
    # The server keeps the tf.function call when the op cannot be made or answers otherwise.
    assert op is not None, _changed("tensorflow's loaded ConcreteFunction (as one op)", where)
    by_op = op.call(_flat_inputs())
    by_call = loaded_signature._call_flat(_flat_inputs(), captured)
    np.testing.assert_array_equal(by_op["y"].numpy(), by_call["y"].numpy())


def test_eager_tensor_made_directly():
    import tensorflow as tf
    from tensorflow.python.eager import context
    from tensorflow.python.framework import ops

    where = f"{SERVABLE} (_eager_tensors)"
    assert callable(getattr(context.context(), "ensure_initialized", None)), _changed(
        "tensorflow.python.eager.context Context.ensure_initialized", where
    )
    array = np.array([1.5, 2.5], np.float32)
    try:  # what _eager_tensors makes: (value, device None: host memory, DataType number)
        tensor = ops.EagerTensor(array, None, tf.float32.as_datatype_enum)
    except Exception as err:
        pytest.fail(_changed(f"tensorflow.python.framework.ops.EagerTensor(...) ({err})", where))
    assert tensor.dtype == tf.float32 and tensor.numpy().tolist() == [1.5, 2.5]


def test_session_make_callable_from_options():
    import tensorflow as tf
    from tensorflow.core.protobuf import config_pb2

    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 1], name="x")
        tf.identity(x * 2.0, name="y")
    session = tf.compat.v1.Session(graph=graph)
    make = getattr(session, "_make_callable_from_options", None)
    assert make is not None, _changed(
        "tensorflow Session._make_callable_from_options", f"{SERVABLE}: SessionSignature"
    )
    run = make(config_pb2.CallableOptions(feed=["x:0"], fetch=["y:0"]))
    # A feed of another shape than the placeholder declares, as TF Serving allows.
    assert run(np.array([1.0, 2.0], np.float32))[0].tolist() == [2.0, 4.0]


def test_eager_tensor_numpy_without_copy():
    import tensorflow as tf

    tensor = tf.constant([1, 2], tf.int64)
    read = getattr(tensor, "_numpy", None)
    assert read is not None, _changed(
        "tensorflow EagerTensor._numpy", f"{SERVABLE} (Signature.call_alone, _same_outputs)"
    )
    assert isinstance(read(), np.ndarray) and read().tolist() == [1, 2]


# --- TensorFlow: AutoGraph's conversion rules (components/trainer/autograph.py) ----------------


def test_autograph_conversion_rules():
    from tensorflow.python.autograph.core import config
    from tensorflow.python.autograph.impl import conversion

    where = "components/trainer/autograph.py (leave_tf_keras_unconverted)"
    rules = getattr(config, "CONVERSION_RULES", None)
    assert isinstance(rules, tuple), _changed(
        "tensorflow.python.autograph.core.config.CONVERSION_RULES", where
    )
    rule = getattr(config, "DoNotConvert", None)
    assert rule is not None and rule("tf_keras").matches("tf_keras.src.engine"), _changed(
        "tensorflow.python.autograph.core.config.DoNotConvert(prefix).matches(module)", where
    )
    # The rules are read from the module on every conversion, so replacing them takes effect.
    assert "config.CONVERSION_RULES" in inspect.getsource(conversion.is_allowlisted), _changed(
        "tensorflow.python.autograph.impl.conversion.is_allowlisted (reading CONVERSION_RULES)",
        where,
    )


# --- TFX: the local runner (pipelines/run/local.py) and the Evaluator benchmark ----------------


def test_beam_dependency_flags_replaceable():
    where = "pipelines/run/local.py (_no_tfx_package_for_direct_runner), bench/bench_evaluator.py"
    function = _definition("tfx.utils.dependency_utils", "make_beam_dependency_flags", where)
    assert _parameters(function) == ["beam_pipeline_args"], _changed(
        "tfx.utils.dependency_utils.make_beam_dependency_flags(beam_pipeline_args)", where
    )
    # Replacing the module's attribute works because the executor looks it up at call time.
    executor = _module_file("tfx.dsl.components.base.base_beam_executor").read_text()
    assert "dependency_utils.make_beam_dependency_flags(" in executor, _changed(
        "tfx.dsl.components.base.base_beam_executor (calling make_beam_dependency_flags)", where
    )


def test_collector_frozen_after_the_local_runner_import():
    where = "pipelines/run/local.py (_collector_paused)"
    assert callable(getattr(gc, "freeze", None)), f"Python has no gc.freeze; used in {where}"
    # The first import is recognised by this module's name in sys.modules.
    assert _module_file("tfx.orchestration.local.local_dag_runner") is not None, _changed(
        "module tfx.orchestration.local.local_dag_runner", where
    )


def test_pipeline_compiled_and_run_from_its_ir():
    where = "pipelines/run/local.py (execute)"
    _definition("tfx.dsl.compiler.compiler", "Compiler.compile", where)
    _definition("tfx.dsl.compiler.constants", "PIPELINE_RUN_ID_PARAMETER_NAME", where)
    substitute = _definition(
        "tfx.orchestration.portable.runtime_parameter_utils", "substitute_runtime_parameter", where
    )
    assert _parameters(substitute) == ["msg", "parameter_bindings"], _changed(
        "tfx.orchestration.portable.runtime_parameter_utils.substitute_runtime_parameter", where
    )
    run = _definition(
        "tfx.orchestration.local.local_dag_runner", "LocalDagRunner.run_with_ir", where
    )
    assert _parameters(run)[:1] == ["pipeline"], _changed(
        "tfx.orchestration.local.local_dag_runner.LocalDagRunner.run_with_ir", where
    )


# --- TFMA: the vectorized evaluation engine (components/evaluator/vectorized.py) ----------------

VECTORIZED = "components/evaluator/vectorized.py"
MPV = "tensorflow_model_analysis.evaluators.metrics_plots_and_validations_evaluator"


def test_tfma_evaluator_stages():
    where = f"{VECTORIZED} (evaluate)"
    expected = {
        "_filter_and_separate_computations": ["computations"],
        "_AddDerivedCrossSliceAndDiffMetrics": [
            "sliced_base_metrics",
            "derived_computations",
            "cross_slice_computations",
            "cross_slice_specs",
            "baseline_model_name",
        ],
        "_add_ci_derived_metrics": ["sliced_metrics", "computations"],
        "_remove_private_metrics": ["slice_key", "metrics"],
        "_filter_by_key_type": ["sliced_metrics_plots_attributions", "key_type"],
    }
    for name, parameters in expected.items():
        function = _definition(MPV, name, where)
        assert _parameters(function) == parameters, _changed(
            f"{MPV}.{name}{tuple(_parameters(function))}", where
        )
    fields = ast.unparse(_definition(MPV, "MetricComputations", where))
    for field in ("non_derived_computations", "derived_computations", "cross_slice_computations"):
        assert repr(field) in fields, _changed(f"{MPV}.MetricComputations.{field}", where)


def test_tfma_combiners_read_by_the_vectorized_engine():
    where = f"{VECTORIZED} (unsupported, histogram_sums, confusion_counts)"
    combiners = {
        # A combiner of another class name is not recognised: the engine hands the run to TFMA.
        ("tensorflow_model_analysis.metrics.calibration_histogram", "_HISTOGRAM"): {
            "_key", "_aggregation_type", "_class_weights", "_example_weighted",
            "_num_buckets", "_left", "_range", "_fractional_labels", "_prediction_based_bucketing",
        },
        ("tensorflow_model_analysis.metrics.binary_confusion_matrices", "_CONFUSION"): {
            "_key", "_aggregation_type", "_class_weights", "_example_weighted",
            "_example_id_key", "_extract_label_prediction_and_weight",
            "_binary_confusion_matrices",
        },
        ("tensorflow_model_analysis.contrib.aggregates.binary_confusion_matrices", None): {
            "_thresholds", "_enable_fractional_labels",
        },
    }  # fmt: skip
    for (module, constant), attributes in combiners.items():
        name = _conveyor_constant(VECTORIZED, constant) if constant else "BinaryConfusionMatrices"
        cls = _definition(module, name, where)
        missing = attributes - _self_attributes(cls)
        assert not missing, _changed(f"{module}.{name} attributes {sorted(missing)}", where)
    matrix = ast.unparse(
        _definition("tensorflow_model_analysis.contrib.aggregates.binary_confusion_matrices",
                    "Matrix", where)
    )  # fmt: skip
    for field in ("tp", "tn", "fp", "fn"):
        assert repr(field) in matrix, _changed(
            "tensorflow_model_analysis.contrib.aggregates.binary_confusion_matrices.Matrix", where
        )


# --- TFX and TFDV: ExampleGen and StatisticsGen -------------------------------------------------

CSV_EXECUTOR = "tfx.components.example_gen.csv_example_gen.executor"
# ast.dump of TFX 1.16's _CsvToExample.expand, which components/csv_example_gen/executor.py
# copies with its own record reader: a change to TFX's version is a change to review there.
CSV_TO_EXAMPLE_EXPAND_SHA256 = "c68d4ff9e653e2cbf15f6b0af90b10ab03cd5028c2637d03d83de6a742c80217"


def test_tfx_csv_transforms():
    where = "components/csv_example_gen/executor.py (_CsvToExample)"
    cls = _definition(CSV_EXECUTOR, "_CsvToExample", where)
    assert "_csv_pattern" in _self_attributes(cls), _changed(
        f"{CSV_EXECUTOR}._CsvToExample._csv_pattern", where
    )
    _definition(CSV_EXECUTOR, "_ParsedCsvToTfExample", where)
    _definition(CSV_EXECUTOR, "Executor.GetInputSourceToExamplePTransform", where)
    expand = _definition(CSV_EXECUTOR, "_CsvToExample.expand", where)
    digest = hashlib.sha256(ast.dump(expand).encode()).hexdigest()
    assert digest == CSV_TO_EXAMPLE_EXPAND_SHA256, _changed(
        f"{CSV_EXECUTOR}._CsvToExample.expand (the code Conveyor's copy follows)", where
    )


def test_tfdv_statistics_in_memory():
    where = "components/statistics_gen/in_process.py (compute)"
    module = "tensorflow_data_validation.statistics.stats_impl"
    function = _definition(module, "generate_statistics_in_memory", where)
    assert _parameters(function) == ["record_batch", "options"], _changed(
        f"{module}.generate_statistics_in_memory", where
    )


def test_tfx_statistics_telemetry_descriptors():
    _definition(
        "tfx.components.statistics_gen.executor",
        "_TELEMETRY_DESCRIPTORS",
        "components/statistics_gen/in_process.py (compute)",
    )


# --- TFX: executors' protected members, component classes, Kubeflow ----------------------------


def test_tfx_executor_protected_members():
    where = "components/*/executor.py (pusher, infra_validator, tflite, arrow/parquet ExampleGen)"
    base = "tfx.dsl.components.base.base_executor"
    log_startup = _definition(base, "BaseExecutor._log_startup", where)
    assert _parameters(log_startup) == ["inputs", "outputs", "exec_properties"], _changed(
        f"{base}.BaseExecutor._log_startup", where
    )
    beam = "tfx.dsl.components.base.base_beam_executor"
    _definition(beam, "BaseBeamExecutor._make_beam_pipeline", where)
    attributes = _self_attributes(_definition(beam, "BaseBeamExecutor", where))
    assert "_beam_pipeline_args" in attributes, _changed(
        f"{beam}.BaseBeamExecutor._beam_pipeline_args", where
    )
    pusher = "tfx.components.pusher.executor"
    marked = _definition(pusher, "Executor._MarkPushed", "components/pusher/executor.py")
    assert _parameters(marked) == ["model_push", "pushed_destination", "pushed_version"], _changed(
        f"{pusher}.Executor._MarkPushed", "components/pusher/executor.py"
    )
    not_pushed = _definition(pusher, "Executor._MarkNotPushed", "components/pusher/executor.py")
    assert _parameters(not_pushed) == ["model_push"], _changed(
        f"{pusher}.Executor._MarkNotPushed", "components/pusher/executor.py"
    )


def test_base_component_init_recognised_by_its_module():
    where = "pipelines/builder/custom.py (_instantiate)"
    init = _definition("tfx.dsl.components.base.base_component", "BaseComponent.__init__", where)
    assert _parameters(init)[:1] == ["spec"], _changed(
        "tfx.dsl.components.base.base_component.BaseComponent.__init__(spec, ...)", where
    )


def test_kubeflow_compiler_internals():
    where = "pipelines/run/kubeflow.py (_kfp_artifact_types, EXECUTOR_COMMAND)"
    module = "tfx.orchestration.kubeflow.v2.compiler_utils"
    _definition(module, "_SUPPORTED_STANDARD_ARTIFACT_TYPES", where)
    title = _definition(module, "_SCHEMA_TITLE_RE", where)
    ours = _conveyor_constant("pipelines/run/kubeflow.py", "_KFP_TYPE_TITLE")
    assert ast.literal_eval(title.value.args[0]) == ours, _changed(
        f"{module}._SCHEMA_TITLE_RE (copied as _KFP_TYPE_TITLE)", where
    )
    executor = "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor"
    assert _module_file(executor) is not None, _changed(f"module {executor}", where)


# --- Every TFX, TFMA, TFDV and tfx_bsl name imported from its own module ------------------------

OWN_MODULE_PACKAGES = ("tfx", "tensorflow_model_analysis", "tensorflow_data_validation", "tfx_bsl")


def _imports_from_own_modules():
    """(file, module, name) of each `from <package>.<module> import <name>` in Conveyor."""
    for package in ("pipelines", "components", "bench"):
        for path in sorted((FRAMEWORK_ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if (
                    isinstance(node, ast.ImportFrom)
                    and node.level == 0
                    and node.module.split(".")[0] in OWN_MODULE_PACKAGES
                ):
                    for alias in node.names:
                        yield path.relative_to(FRAMEWORK_ROOT), node.module, alias.name


def test_library_names_found_where_conveyor_imports_them():
    wrong = []
    for path, module, name in _imports_from_own_modules():
        found = _module_file(module)
        if found is None:
            wrong.append(_changed(f"module {module}", str(path)))
        elif _module_file(f"{module}.{name}") is not None or found.suffix != ".py":
            continue  # a submodule, or a name of a compiled extension or namespace package
        elif _top_level(_tree(module), name) is None:
            wrong.append(_changed(f"{module}.{name}", str(path)))
    assert wrong == []
