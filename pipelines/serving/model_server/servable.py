"""One loaded version of a model: its SavedModel, its signature definitions, and the three
calls TF Serving makes on them (Predict, Classify, Regress), plus the warm-up it runs before a
version is served.

Every request is one call of the signature with the whole batch, as TF Serving's Predict,
Classify and Regress make one `Session::Run` (with server-side batching on, concurrent requests'
calls are merged by `batching.py`, as TF Serving's batching session merges them). Classify and
Regress check the signature as TF Serving does with its default flags
(`--enable_signature_method_name_check=false`): one input named `inputs` fed with serialized
tf.Examples, and `classes`/`scores` (classify) or `outputs` (regress) to answer with, whatever
the signature's method_name.

A TF1 SavedModel that `tf.saved_model.load` cannot load (an old placeholder its graph's shape
inference now refuses, signatures answering with reference-typed tensors) is run as TF Serving
runs every SavedModel: loaded into a session, each signature a callable over the graph
(`SessionSignature`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from pipelines.core import storage
from pipelines.core.object_path import ObjectPath, as_path
from pipelines.serving.model_server import json_tensor
from pipelines.serving.model_server.errors import ServingError, from_tensorflow, invalid_argument

log = logging.getLogger("conveyor.serving")

DEFAULT_SIGNATURE = "serving_default"
SERVE_TAG = "serve"
WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")
# TF Serving replays at most this many warm-up records (saved_model_warmup_util.cc).
MAX_WARMUP_RECORDS = 1000

CLASSIFY_INPUTS, CLASSIFY_CLASSES, CLASSIFY_SCORES = "inputs", "classes", "scores"
REGRESS_INPUTS, REGRESS_OUTPUTS = "inputs", "outputs"


class LoadError(Exception):
    """A version that could not be loaded or warmed (the message says why)."""


class Signature:
    """One signature: its SignatureDef (TF Serving's view) and the function that runs it.

    What every request needs from the signature (its input dtypes, the order the function takes
    its inputs in, their declared shapes, the captured variables) is worked out once here, so a
    request converts its arrays and makes one flat call of the function, as TF Serving makes one
    `Session::Run`, without the keyword binding and input-spec matching of the structured call.

    The flat call runs the function as one `StatefulPartitionedCall` op, which is how a graph
    calls a function, executed eagerly (`_FunctionOp`). Called the way `tf.function` calls it
    (`ConcreteFunction._call_flat`), TensorFlow hands the function's kernels to its inter-op
    thread pool and the caller waits for them: a pool thread that sleeps between requests must
    be woken for every one (whatever executor the call options name). As an op, the function's
    kernels run on the calling thread. The first call (the warm-up's) makes both calls and keeps
    the op only when it answers with the same names, dtypes, shapes and values; a signature it
    cannot run, or runs differently, keeps the `tf.function` call. A request the op fails is
    run again by the `tf.function` call, which words the error as before.
    """

    def __init__(
        self, name: str, definition: Any, function: Any, model: str = "", batcher: Any = None
    ):
        import tensorflow as tf

        self.name = name
        self.model = model
        # A batching.BatchScheduler when the server batches (--enable-batching): `call` then
        # hands its request to it, to be merged with concurrent ones.
        self._batcher = batcher
        self.definition = definition  # meta_graph_pb2.SignatureDef
        self.function = function  # the loaded ConcreteFunction
        #: Input name -> TensorFlow DataType number, from the SignatureDef.
        self.input_dtypes = {name: info.dtype for name, info in definition.inputs.items()}
        self._tf_dtypes = {name: tf.as_dtype(dtype) for name, dtype in self.input_dtypes.items()}
        self._flat_inputs = self._flat_input_specs(tf)
        self._captured = self._fixed_captures()
        # The function as one op (None: the flat call runs it), trusted once the first call
        # has compared it with the flat call (`_checked`).
        self._op = _FunctionOp.of(function, self._captured) if self._flat_inputs else None
        self._checked = False

    def _flat_input_specs(self, tf) -> tuple[tuple[str, tuple | None, int], ...] | None:
        """(name, declared shape, DataType number) of each input in the order the function's
        flat call takes them, or None when the function is not a plain keyword-only signature of the
        SignatureDef's inputs (then every call takes the structured path)."""
        if not hasattr(self.function, "_call_flat"):
            return None
        try:
            args, kwargs = self.function.structured_input_signature
        except (AttributeError, TypeError, ValueError):
            return None
        if args or not isinstance(kwargs, dict) or set(kwargs) != set(self.input_dtypes):
            return None
        specs = []
        for name in sorted(kwargs):  # tf.nest flattens a dict in key order
            spec = kwargs[name]
            if not isinstance(spec, tf.TensorSpec) or spec.dtype != self._tf_dtypes[name]:
                return None
            dims = None if spec.shape.rank is None else tuple(spec.shape.as_list())
            specs.append((name, dims, self.input_dtypes[name]))
        return tuple(specs)

    def _fixed_captures(self) -> list | None:
        """The captured inputs (the variables' handles) the flat call passes, read once when
        they are fixed; None when one is computed at call time (a capture made with
        `capture_call_time_value`), and then every call reads them afresh."""
        if self._flat_inputs is None:
            return None
        captures = getattr(self.function, "_captured_inputs", None)
        if captures is None or any(callable(capture) for capture in captures):
            return None
        return self.function.captured_inputs

    def call(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Runs the signature on `feeds` (name -> array) and returns its outputs: one call of
        its own, or, when the server batches, its rows of a call merged with other requests'."""
        if self._batcher is not None:
            return self._batcher.call(self, feeds)
        return self.call_alone(feeds)

    def call_alone(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Runs the signature once on `feeds` and returns its outputs (what a batch runs)."""
        import tensorflow as tf

        try:
            tensors = self.input_tensors(feeds)
            if tensors is not None:
                outputs = self._call_tensors(tensors)
            else:
                outputs = self.function(
                    **{
                        name: tf.constant(value, dtype=self._tf_dtypes.get(name))
                        for name, value in feeds.items()
                    }
                )
        except (tf.errors.OpError, TypeError, ValueError) as err:
            raise from_tensorflow(err) from None
        return output_arrays(outputs)

    def input_tensors(self, feeds: Mapping[str, Any]) -> list | None:
        """A request's arrays (name -> array) as the flat call's input tensors, in its order;
        None when they do not fit it (`_fits_flat_call`), and the structured call takes them.
        Raises TensorFlow's TypeError or ValueError for a value its dtype cannot hold."""
        if not self._fits_flat_call(feeds):
            return None
        return _eager_tensors(feeds, self._flat_inputs)

    def call_flat(self, tensors: list) -> Mapping[str, Any]:
        """The function run on `input_tensors`' list: its output tensors by name, as `call`
        runs it (for timing a request's steps apart: the serving benchmark's breakdown)."""
        return self._call_tensors(tensors)

    def prepared_call(self, tensors: Mapping[str, Any]) -> Callable[[], Mapping[str, Any]]:
        """A call of the function on these ready-made tensors (name -> tf.Tensor), returning
        its output tensors by name: the call `call` makes (`_call_tensors`), with everything
        `call` does around it (conversion, checks, reading the outputs) done once here. What a
        server with no overhead at all would do per request: the serving benchmark's limit."""
        if not self._fits_flat_call(tensors):
            return lambda: self.function(**tensors)
        flat = [tensors[name] for name, _, _ in self._flat_inputs]
        return lambda: self._call_tensors(flat)

    def _call_tensors(self, tensors: list) -> Mapping[str, Any]:
        """The function run on its input tensors (in flat order): output tensors by name."""
        captured = self._captured if self._captured is not None else self.function.captured_inputs
        op = self._op  # read once: a concurrent first call may drop it
        if op is None:
            return self.function._call_flat(tensors, captured)
        if not self._checked:
            return self._first_call(op, tensors, captured)
        import tensorflow as tf

        try:
            return op.call(tensors)
        except tf.errors.OpError:
            # A failing request (a misshapen batch, say): the flat call words its error, as
            # before, with the function's node named.
            return self.function._call_flat(tensors, captured)

    def _first_call(self, op: _FunctionOp, tensors: list, captured: list) -> Mapping[str, Any]:
        """Makes the flat call and the op call, keeps the op when it answers the same, and
        returns the flat call's outputs (or raises its error, deciding nothing)."""
        outputs = self.function._call_flat(tensors, captured)
        try:
            refusal = None if _same_outputs(outputs, op.call(tensors)) else "other answers"
        except Exception as err:  # any refusal of the op keeps the flat call
            refusal = f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0]}"
        if refusal:
            log.info("%s %s: called as tf.function calls it (as one op: %s)", self.model,
                     self.name, refusal)  # fmt: skip
            self._op = None
        self._checked = True
        return outputs

    @property
    def runs_as_one_op(self) -> bool:
        """Whether requests run the function as one op on the calling thread (see the class's
        docstring): False before the first call has compared the two calls, and for a
        signature that keeps the `tf.function` call."""
        return self._op is not None and self._checked

    def _fits_flat_call(self, values: Mapping[str, Any]) -> bool:
        """Whether `values` (arrays or tensors by name) are exactly the signature's inputs,
        each of its declared shape. When not, the structured call is made instead, and raises
        the error TensorFlow words for a missing, extra or misshapen input."""
        specs = self._flat_inputs
        if specs is None or len(values) != len(specs):
            return False
        for name, dims, _ in specs:
            value = values.get(name)
            if value is None:
                return False
            if dims is None:
                continue
            shape = value.shape if hasattr(value, "shape") else np.shape(value)
            if len(shape) != len(dims):
                return False
            for declared, given in zip(dims, shape, strict=True):
                if declared is not None and declared != given:
                    return False
        return True


class SessionSignature:
    """One signature of a SavedModel run in a TF1 session, as TF Serving runs every signature
    (one `Session::Run` feeding the inputs' tensors, fetching the outputs'): the same calls as
    `Signature` (`call`, `call_alone`), for the models `tf.saved_model.load` cannot load.

    The call is a session callable made from CallableOptions (`Session._make_callable_from_options`,
    private): `Session.run` and the public `make_callable` refuse a feed whose shape differs from
    the placeholder's declared one, which TF Serving's Session::Run does not check (its
    half_plus_three declares `x` as [?,1] and its documentation feeds [3]). Without the private
    call the public one is made, and such a feed is refused; the tests on that model fail."""

    def __init__(self, name: str, definition: Any, session: Any, model: str = "", batcher=None):
        from tensorflow.core.protobuf import config_pb2

        self.name = name
        self.model = model
        self._batcher = batcher
        self.definition = definition  # meta_graph_pb2.SignatureDef
        #: Input name -> TensorFlow DataType number, from the SignatureDef.
        self.input_dtypes = {name: info.dtype for name, info in definition.inputs.items()}
        self._inputs = tuple(sorted(definition.inputs))
        self._outputs = tuple(sorted(definition.outputs))
        self._numpy_dtypes = {
            name: json_tensor.NUMPY_DTYPES.get(dtype, object)
            for name, dtype in self.input_dtypes.items()
        }
        feeds = [definition.inputs[name].name for name in self._inputs]
        fetches = [definition.outputs[name].name for name in self._outputs]
        make_callable = getattr(session, "_make_callable_from_options", None)
        if make_callable is not None:
            self._run = make_callable(config_pb2.CallableOptions(feed=feeds, fetch=fetches))
        else:  # the public call: feeds must then fit the placeholders' declared shapes
            self._run = session.make_callable(fetches, feeds)

    @property
    def runs_as_one_op(self) -> bool:
        """False: a session runs the graph (see `Signature.runs_as_one_op`)."""
        return False

    def call(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Runs the signature on `feeds` (name -> array), alone or batched (as `Signature`)."""
        if self._batcher is not None:
            return self._batcher.call(self, feeds)
        return self.call_alone(feeds)

    def call_alone(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """One run of the signature's outputs on `feeds` (predict_util.cc's checks first)."""
        import tensorflow as tf

        if set(feeds) != set(self._inputs):
            sent, wanted = sorted(feeds), list(self._inputs)
            raise invalid_argument(
                f"input size does not match signature: {len(sent)}!={len(wanted)} "
                f"len({{{','.join(sent)}}}) != len({{{','.join(wanted)}}}). Sent extra: "
                f"{{{','.join(n for n in sent if n not in self.input_dtypes)}}}. Missing but "
                f"required: {{{','.join(n for n in wanted if n not in feeds)}}}."
            )
        # Arrays go in as they are: classify and regress feed serialized tf.Examples whatever
        # dtype the SignatureDef declares (TF1-era exports declare some as float).
        arrays = []
        for name in self._inputs:
            value = feeds[name]
            if not isinstance(value, np.ndarray):
                value = np.asarray(value, self._numpy_dtypes[name])
            arrays.append(value)
        try:
            outputs = self._run(*arrays)
        except (tf.errors.OpError, TypeError, ValueError) as err:
            raise from_tensorflow(err) from None
        return {name: np.asarray(value) for name, value in zip(self._outputs, outputs, strict=True)}


class _SessionModel:
    """A SavedModel loaded into a TF1 session of its own (tf.compat.v1's loader: the graph,
    the variables restored, the main op run), as TF Serving loads every SavedModel."""

    def __init__(self, path: Path):
        import tensorflow as tf

        self.graph = tf.Graph()
        self.session = tf.compat.v1.Session(graph=self.graph)
        try:
            with self.graph.as_default():
                self.meta_graph = tf.compat.v1.saved_model.loader.load(
                    self.session, [SERVE_TAG], str(path)
                )
        except BaseException:
            self.session.close()
            raise

    def signatures(self, model: str, batcher: Any) -> dict[str, SessionSignature]:
        """Every signature of the MetaGraphDef, run in this session."""
        return {
            name: SessionSignature(name, definition, self.session, model, batcher)
            for name, definition in self.meta_graph.signature_def.items()
        }


class _FunctionOp:
    """A loaded function run as one `StatefulPartitionedCall` op (see `Signature`): the op
    `tf.function` adds to a graph to call a function, with the function's name, its input and
    output types and the context's configuration as attributes, executed eagerly."""

    def __init__(
        self, name: str, captured: list, input_types: list, output_types: list, output_names: tuple
    ):
        from tensorflow.core.framework import attr_value_pb2
        from tensorflow.python.eager import context, execute

        # Looked up once: a request pays for the call only.
        self._execute, self._context = execute.execute, context.context
        self._captured = list(captured)
        self._output_names = output_names
        self._attrs = (
            "Tin", input_types,
            "Tout", output_types,
            "f", attr_value_pb2.NameAttrList(name=name),
            "config", "",
            "config_proto", context.context().function_call_options.config_proto_serialized,
            # The default executor: under the op it too runs the kernels on the calling thread
            # (as fast as the single-threaded one, measured), and it runs every function.
            "executor_type", "",
        )  # fmt: skip

    @classmethod
    def of(cls, function: Any, captured: list | None) -> _FunctionOp | None:
        """The op for a loaded ConcreteFunction, or None when it cannot stand in for the flat
        call: captures read at call time or not plain tensors (a distributed variable's), or
        outputs other than one flat dict of tensors."""
        import tensorflow as tf
        from tensorflow.python.framework import ops

        atomic = getattr(function, "_inference_function", None)
        structured = getattr(function, "structured_outputs", None)
        if atomic is None or captured is None or not isinstance(structured, dict):
            return None
        if not all(isinstance(capture, ops.EagerTensor) for capture in captured):
            return None
        names = tuple(sorted(structured))  # tf.nest flattens a dict in key order
        if any(not isinstance(structured[name], tf.Tensor | tf.TensorSpec) for name in names):
            return None
        outputs = [spec.dtype for spec in atomic.function_type.flat_outputs]
        if len(outputs) != len(names) or any(d in (tf.resource, tf.variant) for d in outputs):
            return None
        definition = atomic.cached_definition.signature
        inputs = [arg.type for arg in definition.input_arg]
        name = atomic.name.decode() if isinstance(atomic.name, bytes) else atomic.name
        return cls(name, captured, inputs, [d.as_datatype_enum for d in outputs], names)

    def call(self, tensors: list) -> dict:
        """Runs the function on its input tensors: output tensors by name."""
        outputs = self._execute(
            "StatefulPartitionedCall",
            len(self._output_names),
            tensors + self._captured,
            self._attrs,
            self._context(),
        )
        return dict(zip(self._output_names, outputs, strict=True))


def _same_outputs(expected: Mapping[str, Any], actual: Mapping[str, Any]) -> bool:
    """Whether two calls' output tensors are the same: names, dtypes, shapes and values (NaN
    equal to NaN)."""
    if set(expected) != set(actual):
        return False
    for name, tensor in expected.items():
        left, right = tensor._numpy(), actual[name]._numpy()
        if not isinstance(left, np.ndarray):
            left, right = np.asarray(left), np.asarray(right)
        if left.dtype != right.dtype or left.shape != right.shape:
            return False
        if left.dtype.kind in "fc":
            if not np.array_equal(left, right, equal_nan=True):
                return False
        elif not np.array_equal(left, right):
            return False
    return True


def output_arrays(outputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """A call's output tensors as numpy arrays, by name. `_numpy()` is what `numpy()` returns a
    copy of: the answer only reads the outputs, so the copy is not needed."""
    return {name: tensor._numpy() for name, tensor in outputs.items()}


def _eager_tensors(feeds: Mapping[str, Any], specs: tuple) -> list:
    """The arrays of `feeds` as eager tensors of the signature's dtypes, in the flat call's
    order (`specs`: name, shape, DataType number).

    This is what `tf.constant(array, dtype)` comes down to in eager mode
    (`constant_op.convert_to_eager_tensor`), less its Python layers and two costs that a
    request's inputs do not need. The arrays are made for this one request and never written
    again, so the tensor may share their memory. And the tensor is left in host memory (no
    device named): naming the context's device runs one `_EagerConst` op per input to place
    (and copy) it there, 5-10 us each on a CPU, while the function call places its inputs
    itself, on the device its kernels run on, as it does for any host tensor. Conversion and
    its errors are the same."""
    from tensorflow.python.eager import context
    from tensorflow.python.framework import ops

    context.context().ensure_initialized()
    return [ops.EagerTensor(feeds[name], None, dtype) for name, _, dtype in specs]


def _meta_graph(path: Path) -> Any:
    """The MetaGraphDef tagged `serve` of the SavedModel at `path` (binary or text)."""
    from google.protobuf import text_format
    from tensorflow.core.protobuf import saved_model_pb2

    saved_model = saved_model_pb2.SavedModel()
    binary, text = path / "saved_model.pb", path / "saved_model.pbtxt"
    if binary.is_file():
        saved_model.ParseFromString(binary.read_bytes())
    elif text.is_file():
        text_format.Parse(text.read_text(), saved_model)
    else:
        raise LoadError(f"{path} holds no saved_model.pb or saved_model.pbtxt")
    for meta_graph in saved_model.meta_graphs:
        if SERVE_TAG in meta_graph.meta_info_def.tags:
            return meta_graph
    raise LoadError(f"{path} has no MetaGraphDef tagged {SERVE_TAG!r}")


class Servable:
    """A loaded version of a model; build one with `Servable.load`. Thread-safe: requests
    call it concurrently, and it stays usable while requests hold it after an unload."""

    def __init__(
        self,
        model: str,
        version: int,
        path: Path,
        meta_graph: Any,
        loaded: Any,
        batcher: Any = None,
    ):
        self.model = model
        self.version = version
        self.path = path
        self._meta_graph = meta_graph
        # Keeps the variables the functions capture (or the session) alive.
        self._loaded = loaded
        self.signatures: dict[str, Signature | SessionSignature]
        if isinstance(loaded, _SessionModel):
            self.signatures = loaded.signatures(model, batcher)
        else:
            functions = loaded.signatures
            self.signatures = {
                name: Signature(name, definition, functions[name], model, batcher)
                for name, definition in meta_graph.signature_def.items()
                if name in functions
            }
        self._metadata: dict | None = None

    @property
    def in_session(self) -> bool:
        """Whether the version runs in a TF1 session (`tf.saved_model.load` could not load it)."""
        return isinstance(self._loaded, _SessionModel)

    @classmethod
    def load(
        cls, model: str, version: int, path: str | os.PathLike, batcher: Any = None
    ) -> Servable:
        """Loads the SavedModel of `version` at `path` (raises LoadError naming the cause);
        with `batcher` (a batching.BatchScheduler) its signatures' calls are batched."""
        import tensorflow as tf

        path = as_path(path)
        if isinstance(path, ObjectPath):  # s3:// is tensorflow-io's, registered on first use
            storage.register_tensorflow_filesystems()
        meta_graph = _meta_graph(path)
        try:
            loaded = tf.saved_model.load(str(path), tags=[SERVE_TAG])
        except Exception as err:  # any failure to load is the version's, reported by status
            # A TF1 SavedModel the TF2 loader cannot take: run it in a session, as TF Serving
            # runs it. When that fails too, the TF2 loader's error is the one reported.
            try:
                loaded = _SessionModel(path)
            except Exception:
                raise LoadError(f"{path}: {type(err).__name__}: {err}") from err
            reason = (str(err).strip().splitlines() or [""])[0]
            log.info("%s version %d: run in a TF1 session (%s)", model, version, reason)
        return cls(model, version, path, meta_graph, loaded, batcher)

    # ------------------------------------------------------------------------------ lookups

    def signature(self, name: str) -> Signature:
        """The signature a :predict request names ("" is serving_default)."""
        chosen = name or DEFAULT_SIGNATURE
        if chosen not in self.signatures:
            raise invalid_argument(f'Serving signature name: "{chosen}" not found in signature def')
        return self.signatures[chosen]

    def _signature_for_examples(self, name: str) -> Signature:
        chosen = name or DEFAULT_SIGNATURE
        if chosen not in self.signatures:
            raise invalid_argument(f"No signature was found with the name: {chosen}")
        return self.signatures[chosen]

    # ------------------------------------------------------------------------------ calls

    def predict(self, doc: Mapping[str, Any]) -> dict:
        """A :predict request body -> TF Serving's answer (one call of the signature), its
        numeric values left as numpy arrays for `json_tensor.dumps` to write."""
        signature_name = json_tensor.signature_name(doc)
        signature = self.signature(signature_name)
        feeds, request_format = json_tensor.predict_inputs(
            doc, signature.input_dtypes, signature_name
        )
        return json_tensor.predict_answer(signature.call(feeds), request_format, arrays=True)

    def classify(self, doc: Mapping[str, Any]) -> dict:
        """A :classify request body -> TF Serving's answer."""
        signature_name = json_tensor.signature_name(doc)
        examples = json_tensor.serialized_examples(doc)
        labels, scores = self.classify_examples(signature_name, examples)
        return json_tensor.classify_answer(labels, scores)

    def regress(self, doc: Mapping[str, Any]) -> dict:
        """A :regress request body -> TF Serving's answer."""
        signature_name = json_tensor.signature_name(doc)
        examples = json_tensor.serialized_examples(doc)
        return json_tensor.regress_answer(self.regress_examples(signature_name, examples))

    def classify_examples(
        self, signature_name: str, examples: list[bytes]
    ) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Runs a classification signature on serialized tf.Examples: (classes, scores), each
        [examples, classes] or None when the signature has no such output (classifier.cc's
        PreProcessClassification and PostProcessClassificationResult)."""
        signature = self._signature_for_examples(signature_name)
        definition = signature.definition
        if len(definition.inputs) != 1:
            raise invalid_argument("Expected one input Tensor.")
        if len(definition.outputs) not in (1, 2):
            raise invalid_argument(
                f"Expected one or two output Tensors, found {len(definition.outputs)}"
            )
        if CLASSIFY_INPUTS not in definition.inputs:
            raise invalid_argument(f"No classification inputs found in SignatureDef: {definition}")
        if CLASSIFY_CLASSES not in definition.outputs and CLASSIFY_SCORES not in definition.outputs:
            raise invalid_argument(
                'Expected classification signature outputs to contain at least one of "classes" '
                f'or "scores". Signature was: {definition}'
            )
        outputs = signature.call({CLASSIFY_INPUTS: _string_array(examples)})
        classes = outputs.get(CLASSIFY_CLASSES) if CLASSIFY_CLASSES in definition.outputs else None
        scores = outputs.get(CLASSIFY_SCORES) if CLASSIFY_SCORES in definition.outputs else None
        for kind, tensor in (("classes", classes), ("scores", scores)):
            if tensor is None:
                continue
            if tensor.ndim != 2:
                raise invalid_argument(
                    f"Expected Tensor shape: [batch_size num_classes] but got {_shape(tensor)}"
                )
            if kind == "classes" and tensor.dtype.kind != "O":
                raise invalid_argument(
                    f"Expected classes Tensor of DT_STRING. Got: {_dtype_enum_name(tensor)}"
                )
            if kind == "scores" and tensor.dtype != np.float32:
                raise invalid_argument(
                    f"Expected scores Tensor of DT_FLOAT. Got: {_dtype_enum_name(tensor)}"
                )
            if tensor.shape[0] != len(examples):
                raise invalid_argument(
                    f"Expected {kind} output batch size of {len(examples)}. Got: {tensor.shape[0]}"
                )
        if classes is not None and scores is not None and classes.shape[1] != scores.shape[1]:
            raise invalid_argument(
                "Tensors class and score should match in dim_size(1). Got "
                f"{classes.shape[1]} vs. {scores.shape[1]}"
            )
        return classes, scores

    def regress_examples(self, signature_name: str, examples: list[bytes]) -> np.ndarray:
        """Runs a regression signature on serialized tf.Examples: one value per example
        (regressor.cc's PreProcessRegression and PostProcessRegressionResult)."""
        signature = self._signature_for_examples(signature_name)
        definition = signature.definition
        if len(definition.inputs) != 1:
            raise invalid_argument("Expected one input Tensor.")
        if len(definition.outputs) != 1:
            raise invalid_argument("Expected one output Tensor.")
        if REGRESS_INPUTS not in definition.inputs:
            raise invalid_argument(f"No regression inputs found in SignatureDef: {definition}")
        if REGRESS_OUTPUTS not in definition.outputs:
            raise invalid_argument(f"No regression outputs found in SignatureDef: {definition}")
        values = signature.call({REGRESS_INPUTS: _string_array(examples)})[REGRESS_OUTPUTS]
        if not (values.ndim == 1 or (values.ndim == 2 and values.shape[1] == 1)):
            raise invalid_argument(
                "Expected output Tensor shape to be either [batch_size] or [batch_size, 1] but "
                f"got {_shape(values)}"
            )
        if values.dtype != np.float32:
            raise invalid_argument(
                f"Expected output Tensor of DT_FLOAT.  Got: {_dtype_enum_name(values)}"
            )
        if values.shape[0] != len(examples):
            raise invalid_argument(
                "Input batch size did not match output batch size: "
                f"{len(examples)} vs. {values.shape[0]}"
            )
        return values.reshape([-1])

    # ------------------------------------------------------------------------------ metadata

    def metadata(self) -> dict:
        """TF Serving's GetModelMetadata answer over REST: the model spec and every
        SignatureDef of the MetaGraphDef, rendered as `ToJsonString` renders them."""
        if self._metadata is None:
            from google.protobuf import json_format
            from tensorflow_serving.apis import get_model_metadata_pb2

            signature_map = get_model_metadata_pb2.SignatureDefMap()
            for name, definition in self._meta_graph.signature_def.items():
                signature_map.signature_def[name].CopyFrom(definition)
            self._metadata = {
                "model_spec": {
                    "name": self.model,
                    "signature_name": "",
                    "version": str(self.version),
                },
                "metadata": {
                    "signature_def": json_format.MessageToDict(
                        signature_map,
                        including_default_value_fields=True,
                        preserving_proto_field_name=True,
                    )
                },
            }
        return self._metadata

    # ------------------------------------------------------------------------------ warm-up

    def warm_up(self) -> str:
        """Runs the version before it is served, so the first requests find its functions
        traced and optimised: the records of `assets.extra/tf_serving_warmup_requests` when
        there is one (a failing record fails the load, as in TF Serving), else one call of each
        signature with a one-row dummy input. Returns what was done, for the log."""
        warmup = self.path / WARMUP_FILE
        if warmup.is_file():
            count = self._replay_warmup(warmup)
            return f"{count} warm-up request(s) from {WARMUP_FILE}"
        if self.in_session:
            # No dummy calls: a TF1 graph's signatures may change its state (TF Serving's
            # counter model increments a variable), and TF Serving makes none either.
            return "no warm-up records; TF1 session, no dummy calls"
        warmed = sum(self._dummy_call(signature) for signature in self.signatures.values())
        return f"{warmed} of {len(self.signatures)} signature(s) called with a dummy row"

    def _dummy_call(self, signature: Signature) -> bool:
        import tensorflow as tf

        feeds = {}
        for name, spec in signature.function.structured_input_signature[1].items():
            shape = [1 if d is None else d for d in spec.shape.as_list()] if spec.shape.rank else []
            if spec.dtype == tf.string:
                feeds[name] = np.full(shape, b"", dtype=object)
            else:
                feeds[name] = np.zeros(shape, dtype=spec.dtype.as_numpy_dtype)
        try:
            signature.call(feeds)
            return True
        except ServingError as err:
            # A dummy need not be valid input (a tf.Example missing a required feature, say):
            # the call has traced and optimised the function all the same.
            log.debug("warm-up of %s/%s: %s", self.version, signature.name, err.message)
            return False

    def _replay_warmup(self, path: Path) -> int:
        import tensorflow as tf
        from tensorflow_serving.apis import prediction_log_pb2

        count = 0
        for record in tf.data.TFRecordDataset(str(path)).take(MAX_WARMUP_RECORDS):
            entry = prediction_log_pb2.PredictionLog.FromString(record.numpy())
            kind = entry.WhichOneof("log_type")
            try:
                if kind == "predict_log":
                    request = entry.predict_log.request
                    signature = self.signature(request.model_spec.signature_name)
                    signature.call({name: tf.make_ndarray(t) for name, t in request.inputs.items()})
                elif kind in ("classify_log", "regress_log"):
                    request = getattr(entry, kind).request
                    examples = _examples_from_input(request.input)
                    if kind == "classify_log":
                        self.classify_examples(request.model_spec.signature_name, examples)
                    else:
                        self.regress_examples(request.model_spec.signature_name, examples)
                else:
                    raise invalid_argument(f"Unsupported log_type for warmup: {kind}")
            except ServingError as err:
                raise LoadError(
                    f"warm-up record {count + 1} of {path} failed: {err.message}"
                ) from None
            count += 1
        return count


def _examples_from_input(request_input: Any) -> list[bytes]:
    """TF Serving's Input proto (example_list or example_list_with_context) as serialized
    tf.Examples, the context serialized ahead of each example."""
    kind = request_input.WhichOneof("kind")
    if kind == "example_list_with_context":
        listed = request_input.example_list_with_context
        context = listed.context.SerializeToString()
        return [context + e.SerializeToString() for e in listed.examples]
    return [e.SerializeToString() for e in request_input.example_list.examples]


def _string_array(values: list[bytes]) -> np.ndarray:
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array


def _shape(array: np.ndarray) -> str:
    # TensorShape::DebugString: "[2,3]".
    return "[" + ",".join(str(d) for d in array.shape) + "]"


def _dtype_enum_name(array: np.ndarray) -> str:
    names = {
        "float64": "DT_DOUBLE",
        "int64": "DT_INT64",
        "int32": "DT_INT32",
        "object": "DT_STRING",
    }
    return names.get(array.dtype.name, f"DT_{array.dtype.name.upper()}")
