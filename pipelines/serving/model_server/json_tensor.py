"""TF Serving's JSON mapping, as `tensorflow_serving/util/json_tensor.cc` implements it (TF Serving
2.16): request bodies into tensors (predict) or serialized tf.Examples (classify, regress), and
results back into the JSON TF Serving answers with.

The checks, their order and their messages follow json_tensor.cc, so a request TF Serving
refuses is refused here with the same words: JSON values quoted as rapidjson's PrettyWriter
writes them (`show`), JSON syntax errors in rapidjson's words and byte offsets. Any JSON number
goes into a float input (an integer as the nearest float, a float beyond float32's range as an
infinity, as rapidjson's GetFloat makes them); numbers are written as TF Serving writes them
(absl's StrCat: "%g", or "%.9g" / "%.17g" when six digits do not give the value back, and ".0"
on whole numbers: `9e+06`, `0.333333343`, `3.0`). Answers are written compactly, where TF
Serving pretty-prints: the same JSON, not the same whitespace.

Bodies are read and answers written with orjson (its C parser and writer cost a fraction of the
`json` module's per request), and with the `json` module whenever orjson would differ: a body
orjson refuses (NaN and Infinity, which TF Serving accepts, integers past 64 bits, nesting past
its depth, another encoding) is parsed again by `json`, which accepts it or locates the error.
A body nested deeper than the parsers go is refused as a parse error (TF Serving 2.16's
recursive parser overflows its stack on one; later releases parse it iteratively).
"""

from __future__ import annotations

import base64
import binascii
import decimal
import json
import math
import re
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import orjson

from pipelines.serving.model_server.errors import ServingError, invalid_argument

ROW = "row"
COLUMNAR = "columnar"

SIGNATURE_KEY = "signature_name"
INSTANCES_KEY = "instances"
INPUTS_KEY = "inputs"
CONTEXT_KEY = "context"
EXAMPLES_KEY = "examples"
BASE64_KEY = "b64"
# Output tensors whose name ends so hold bytes: TF Serving writes them as {"b64": ...}.
BYTES_SUFFIX = "_bytes"

# tensorflow/core/framework/types.proto numbers, and the names DataTypeString gives them.
DT_FLOAT, DT_DOUBLE, DT_INT32, DT_UINT8, DT_INT16, DT_INT8, DT_STRING = 1, 2, 3, 4, 5, 6, 7
DT_INT64, DT_BOOL, DT_UINT32, DT_UINT64 = 9, 10, 22, 23
DTYPE_NAMES = {
    1: "float",
    2: "double",
    3: "int32",
    4: "uint8",
    5: "int16",
    6: "int8",
    7: "string",
    8: "complex64",
    9: "int64",
    10: "bool",
    14: "bfloat16",
    17: "uint16",
    18: "complex128",
    19: "half",
    20: "resource",
    21: "variant",
    22: "uint32",
    23: "uint64",
}
NUMPY_DTYPES = {
    DT_FLOAT: np.float32,
    DT_DOUBLE: np.float64,
    DT_INT32: np.int32,
    DT_UINT8: np.uint8,
    DT_INT16: np.int16,
    DT_INT8: np.int8,
    DT_STRING: object,
    DT_INT64: np.int64,
    DT_BOOL: np.bool_,
    DT_UINT32: np.uint32,
    DT_UINT64: np.uint64,
}
_INT32_TYPES = (DT_INT32, DT_INT16, DT_INT8, DT_UINT8)
_FLOAT32_MAX = float(np.finfo(np.float32).max)
# rapidjson's Value::IsFloat: a double in this range is quoted as the float it converts to.
_QUOTED_AS_FLOAT = 3.4028234e38
# Integers up to this size are doubles exactly: numpy converts them as rapidjson's GetDouble
# (then GetFloat) does. Larger ones are converted through a Python float, as the double it is.
_EXACT_INT = 1 << 53
# For the fast path of row-format requests: the Python types a scalar of each dtype may have,
# and the range an int must lie in (as `_scalar` checks them).
_SCALAR_LIMITS = {
    DT_FLOAT: ((float, int), -_EXACT_INT, _EXACT_INT),
    DT_DOUBLE: ((float, int), -_EXACT_INT, _EXACT_INT),
    DT_INT32: ((int,), -(1 << 31), (1 << 31) - 1),
    DT_INT16: ((int,), -(1 << 31), (1 << 31) - 1),
    DT_INT8: ((int,), -(1 << 31), (1 << 31) - 1),
    DT_UINT8: ((int,), -(1 << 31), (1 << 31) - 1),
    DT_INT64: ((int,), -(1 << 63), (1 << 63) - 1),
    DT_UINT32: ((int,), 0, (1 << 32) - 1),
    DT_UINT64: ((int,), 0, (1 << 64) - 1),
    DT_BOOL: ((bool,), 0, 1),
}
# The message for a body nested deeper than the parsers (or the conversion) go.
NESTED_TOO_DEEPLY = "JSON Parse error: The document is nested too deeply."


def dtype_name(dtype: int) -> str:
    """TensorFlow's DataTypeString: `float`, `int64`, `string`..."""
    return DTYPE_NAMES.get(dtype, f"type {dtype}")


def show(value: Any) -> str:
    """A JSON value as TF Serving's error messages quote it (JsonValueToString): rapidjson's
    PrettyWriter (four-space indents, `"key": value`), a number alone as WriteDecimal writes
    it; a NaN or an infinity inside a value ends the text there, as the writer stops on one."""
    if type(value) is float:
        if -_QUOTED_AS_FLOAT <= value <= _QUOTED_AS_FLOAT:
            return float32_text(float(np.float32(value)))
        return float64_text(value)
    out: list[str] = []
    try:
        _pretty(value, 0, out)
    except _WriterStopped:
        pass
    return "".join(out)


class _WriterStopped(Exception):
    """rapidjson's Writer refused a value (NaN or an infinity): it writes nothing more."""


# A \u00xx escape `json` wrote (after an even run of backslashes: not an escaped backslash).
_CONTROL_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\u00([0-9a-f]{2})")


def _string_text(text: str) -> str:
    """A string as rapidjson's Writer writes it: UTF-8 as it is, quotes, backslashes and control
    characters escaped (\\u00XX in upper case)."""
    written = json.dumps(text, ensure_ascii=False)
    if "\\u00" in written:
        written = _CONTROL_ESCAPE.sub(lambda m: m.group(1) + "\\u00" + m.group(2).upper(), written)
    return written


def _pretty(value: Any, level: int, out: list[str]) -> None:
    if isinstance(value, dict):
        if not value:
            out.append("{}")
            return
        out.append("{")
        for index, (key, item) in enumerate(value.items()):
            out.append(",\n" if index else "\n")
            out.append("    " * (level + 1) + _string_text(key) + ": ")
            _pretty(item, level + 1, out)
        out.append("\n" + "    " * level + "}")
    elif isinstance(value, list):
        if not value:
            out.append("[]")
            return
        out.append("[")
        for index, item in enumerate(value):
            out.append(",\n" if index else "\n")
            out.append("    " * (level + 1))
            _pretty(item, level + 1, out)
        out.append("\n" + "    " * level + "]")
    elif isinstance(value, str):
        out.append(_string_text(value))
    elif value is True or value is False or value is None:
        out.append({True: "true", False: "false", None: "null"}[value])
    elif isinstance(value, int) and -(1 << 63) <= value < (1 << 64):
        out.append(str(value))
    else:  # a float, or an integer past 64 bits (rapidjson holds it as a double)
        try:
            number = float(value)
        except OverflowError:
            raise _WriterStopped from None
        if not math.isfinite(number):
            raise _WriterStopped
        out.append(_rapidjson_double(number))


def _rapidjson_double(value: float) -> str:
    """rapidjson's Writer::Double: the shortest digits, laid out by its Prettify (positional up
    to 21 digits, `1e30` / `1.5e-7` beyond, ".0" on whole numbers)."""
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    sign = "-" if value < 0 else ""
    _, digit_tuple, exponent = decimal.Decimal(repr(abs(value))).as_tuple()
    digits = "".join(map(str, digit_tuple)).rstrip("0")
    exponent += len(digit_tuple) - len(digits)
    length, k = len(digits), exponent
    kk = length + k
    if 0 <= k and kk <= 21:
        text = digits + "0" * k + ".0"
    elif 0 < kk <= 21:
        text = digits[:kk] + "." + digits[kk:]
    elif -6 < kk <= 0:
        text = "0." + "0" * -kk + digits
    elif length == 1:
        text = f"{digits}e{kk - 1}"
    else:
        text = f"{digits[0]}.{digits[1:]}e{kk - 1}"
    return sign + text


def _json_type(value: Any) -> str:
    if value is None:
        return "Null"
    if value is True:
        return "True"
    if value is False:
        return "False"
    if isinstance(value, dict):
        return "Object"
    if isinstance(value, list):
        return "Array"
    if isinstance(value, str):
        return "String"
    return "Number"


def _type_error(value: Any, dtype: int) -> ServingError:
    return invalid_argument(
        f"JSON Value: {show(value)} Type: {_json_type(value)} is not of expected type: "
        f"{dtype_name(dtype)}"
    )


def _format_error(doc: Any, *parts: str) -> ServingError:
    return invalid_argument(f"JSON Value: {show(doc)} {''.join(parts)}")


# ----------------------------------------------------------------------------- parsing


def parse_body(body: bytes) -> dict:
    """The request body as a JSON object (NaN and Infinity accepted, as TF Serving does)."""
    if not body:
        raise invalid_argument("JSON Parse error: The document is empty")
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        doc = _parse_with_json(body)  # the same value, or the error located by `json`
    if not isinstance(doc, dict):
        raise _format_error(doc, "Is not object")
    return doc


def _parse_with_json(body: bytes) -> Any:
    """The body parsed by the `json` module; its errors worded as rapidjson words them
    (ParseJson: "JSON Parse error: <GetParseError_En> at offset: <byte offset>")."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as err:
        raise invalid_argument(
            f"JSON Parse error: Invalid encoding in string. at offset: {err.start}"
        ) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        reason, position = _rapidjson_error(text, err.msg, err.pos)
        offset = len(text[:position].encode("utf-8"))
        raise invalid_argument(f"JSON Parse error: {reason} at offset: {offset}") from None
    except RecursionError:
        raise invalid_argument(NESTED_TOO_DEEPLY) from None


_STRING_OR_BRACKET = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def _rapidjson_error(text: str, message: str, position: int) -> tuple[str, int]:
    """rapidjson's reason and position for the error `json` reports as `message` at
    `position` (reader.h: where each of its errors is raised)."""
    if message == "Expecting value":
        if not text.strip():
            return "The document is empty.", len(text)
        return "Invalid value.", position
    if message.startswith("Expecting property name"):
        return "Missing a name for object member.", position
    if message == "Expecting ':' delimiter":
        return "Missing a colon after a name of object member.", position
    if message == "Expecting ',' delimiter":
        opened = []
        for match in _STRING_OR_BRACKET.finditer(text, 0, position):
            token = match.group()
            if token in "[{":
                opened.append(token)
            elif token in "]}" and opened:
                opened.pop()
        if opened and opened[-1] == "{":
            return "Missing a comma or '}' after an object member.", position
        return "Missing a comma or ']' after an array element.", position
    if message == "Extra data":
        return "The document root must not be followed by other values.", position
    if message.startswith("Unterminated string"):
        return "Missing a closing quotation mark in string.", len(text)
    if message.startswith("Invalid control character"):
        return "Invalid escape character in string.", position
    if message == "Invalid \\escape":
        return "Invalid escape character in string.", position
    if message.startswith("Invalid \\u"):
        return "Incorrect hex digit after \\u escape in string.", text.rfind("\\", 0, position)
    return "Invalid value.", position


def signature_name(doc: Mapping[str, Any]) -> str:
    """The request's `signature_name` ("" when absent: the default signature)."""
    value = doc.get(SIGNATURE_KEY, "")
    if not isinstance(value, str):
        raise _format_error(
            doc, "not formatted correctly. 'signature_name' key must be a string value."
        )
    return value


def _is_base64(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get(BASE64_KEY), str)


def _decode_base64(value: Any) -> bytes:
    if not _is_base64(value):
        raise invalid_argument(f"JSON Value: {show(value)} not formatted correctly for base64 data")
    try:
        return base64.b64decode(value[BASE64_KEY], validate=True)
    except (binascii.Error, ValueError):
        raise invalid_argument("Unable to base64 decode") from None


def _scalar(value: Any, dtype: int) -> Any:
    """One JSON leaf as a value of `dtype` (AddValueToTensor)."""
    if dtype not in NUMPY_DTYPES:
        raise ServingError(
            "UNIMPLEMENTED",
            f"Conversion of JSON Value: {show(value)} to type: {dtype_name(dtype)}",
        )
    if dtype in (DT_FLOAT, DT_DOUBLE):
        # Any number (rapidjson's IsNumber): an integer becomes the double it is nearest to,
        # and a double beyond float32's range an infinity when the tensor is made (GetFloat).
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _type_error(value, dtype)
        if type(value) is int and not -_EXACT_INT <= value <= _EXACT_INT:
            value = _int_as_double(value)
        if dtype == DT_FLOAT and not -_FLOAT32_MAX <= value <= _FLOAT32_MAX:
            return _beyond_float32(value)
        return value
    if dtype == DT_STRING:
        if not isinstance(value, str):
            raise _type_error(value, dtype)
        return value.encode("utf-8")
    if dtype == DT_BOOL:
        if not isinstance(value, bool):
            raise _type_error(value, dtype)
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise _type_error(value, dtype)
    if dtype in _INT32_TYPES:
        if not -(1 << 31) <= value < (1 << 31):
            raise _type_error(value, dtype)
        return value
    if dtype == DT_INT64:
        if not -(1 << 63) <= value < (1 << 63):
            raise _type_error(value, dtype)
        return value
    if dtype == DT_UINT32:
        if not 0 <= value < (1 << 32):
            raise _type_error(value, dtype)
        return value
    if not 0 <= value < (1 << 64):  # DT_UINT64
        raise _type_error(value, dtype)
    return value


def _int_as_double(value: int) -> float:
    """An integer as the double rapidjson holds it as (an infinity past the double range)."""
    try:
        return float(value)
    except OverflowError:
        return math.copysign(math.inf, value)


# Doubles from this magnitude on round to an infinity as float32 (the midpoint between FLT_MAX
# and 2**128, which rounds to even: up); below it, to FLT_MAX.
_FLOAT32_OVERFLOW = 2.0**128 - 2.0**103


def _beyond_float32(value: float) -> float:
    """A double beyond float32's range (or NaN) as the float32 it converts to: an infinity, or
    FLT_MAX for one within half a step of it (so numpy converts it without an overflow)."""
    if value != value or abs(value) >= _FLOAT32_OVERFLOW:
        return value if value != value else math.copysign(math.inf, value)
    return math.copysign(_FLOAT32_MAX, value)


def _dense_shape(value: Any) -> list[int]:
    """GetDenseTensorShape: the shape read along the first element of each nested list."""
    shape = []
    while isinstance(value, list):
        shape.append(len(value))
        if not value:
            break
        value = value[0]
    return shape


def _fill(value: Any, level: int, shape: list[int], dtype: int, out: list) -> None:
    """FillTensorProto: checks that `value` is dense with `shape` and appends its leaves."""
    rank = len(shape)
    if not isinstance(value, list):
        if level != rank:
            raise invalid_argument(
                f"JSON Value: {show(value)} found at incorrect level: {level + 1} in the JSON "
                f"DOM. Expected at level: {rank}"
            )
        if isinstance(value, dict):
            if dtype != DT_STRING:
                raise _type_error(value, dtype)
            out.append(_decode_base64(value))
        else:
            out.append(_scalar(value, dtype))
        return
    if level >= rank:
        raise invalid_argument(f"Encountered list at unexpected level: {level} expected < {rank}")
    if len(value) != shape[level]:
        raise invalid_argument(
            f"Encountered list at unexpected size: {len(value)} at level: {level} expected "
            f"size: {shape[level]}"
        )
    for item in value:
        _fill(item, level + 1, shape, dtype, out)


def _tensor(value: Any, dtype: int) -> tuple[list[int], list]:
    """A JSON value as (shape, flat values) of a dense tensor of `dtype`."""
    shape = _dense_shape(value)
    flat: list = []
    _fill(value, 0, shape, dtype, flat)
    return shape, flat


def _array(shape: Sequence[int], flat: list, dtype: int) -> np.ndarray:
    if dtype == DT_STRING:
        array = np.empty(len(flat), dtype=object)
        array[:] = flat
        return array.reshape(shape)
    return np.asarray(flat, dtype=NUMPY_DTYPES[dtype]).reshape(shape)


def _shape_string(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def predict_inputs(
    doc: Mapping[str, Any], input_dtypes: Mapping[str, int], signature: str
) -> tuple[dict[str, np.ndarray], str]:
    """The input tensors of a :predict request, by signature input name, and its format (ROW
    for `instances`, COLUMNAR for `inputs`), as FillPredictRequestFromJson builds them.

    Args:
      doc: the parsed request body.
      input_dtypes: the signature's inputs, name -> TensorFlow DataType number.
      signature: the signature's name (for messages).
    """
    if not input_dtypes:
        raise invalid_argument(f"Failed to get input map for signature: {signature or 'DEFAULT'}")
    has_instances, has_inputs = INSTANCES_KEY in doc, INPUTS_KEY in doc
    if has_instances and has_inputs:
        raise _format_error(
            doc,
            "Not formatted correctly expecting only one of 'inputs' or 'instances' keys to exist ",
        )
    if has_instances:
        instances = doc[INSTANCES_KEY]
        if not isinstance(instances, list):
            raise _format_error(doc, "Expecting 'instances' to be an list/array")
        if not instances:
            raise _format_error(doc, "No values in 'instances' array")
        return _from_instances(instances, input_dtypes), ROW
    if has_inputs:
        return _from_inputs(doc[INPUTS_KEY], input_dtypes), COLUMNAR
    raise invalid_argument("Missing 'inputs' or 'instances' key")


def _from_instances(instances: list, input_dtypes: Mapping[str, int]) -> dict[str, np.ndarray]:
    """FillTensorMapFromInstancesList: one row per element, batched into one tensor each."""
    columns = _scalar_columns(instances, input_dtypes)
    if columns is not None:
        return columns

    def is_object(value: Any) -> bool:
        return isinstance(value, dict) and not _is_base64(value)

    if not isinstance(instances[0], dict) and len(input_dtypes) > 1:
        raise invalid_argument(
            "instances is a plain list, but expecting list of objects as multiple input "
            "tensors required as per tensorinfo_map"
        )
    objects = is_object(instances[0])
    names = sorted(input_dtypes)
    shapes: dict[str, list[int]] = {}
    values: dict[str, list] = {}

    def add(item: Any, name: str) -> None:
        if name not in input_dtypes:
            raise invalid_argument(f"JSON object: does not have named input: {name}")
        shape, flat = _tensor(item, input_dtypes[name])
        if name not in shapes:
            shapes[name] = shape
            values[name] = []
        elif len(flat) != math.prod(shapes[name]):
            raise invalid_argument(
                f"Expecting tensor size: {math.prod(shapes[name])} but got: {len(flat)}"
            )
        elif shape != shapes[name]:
            raise invalid_argument(
                f"Expecting shape {_shape_string(shapes[name])} but got: {_shape_string(shape)}"
            )
        values[name].extend(flat)

    for index, element in enumerate(instances):
        if objects:
            if not is_object(element):
                raise invalid_argument(
                    f"Expecting object but got list at item {index} of input list"
                )
            for name, item in element.items():
                try:
                    add(item, name)
                except ServingError as err:
                    raise invalid_argument(
                        f"Failed to process element: {index} key: {name} of 'instances' list. "
                        f"Error: {err.status_string()}"
                    ) from None
            if sorted(element) != names:
                raise invalid_argument(
                    f"Failed to process element: {index} of 'instances' list. JSON object: "
                    f"{show(element)} keys must be equal to: {','.join(names)}"
                )
        else:
            if is_object(element):
                raise invalid_argument(
                    f"Expecting value/list but got object at item {index} of input list"
                )
            try:
                add(element, names[0])
            except ServingError as err:
                raise invalid_argument(
                    f"Failed to process element: {index} of 'instances' list. Error: "
                    f"{err.status_string()}"
                ) from None
    count = len(instances)
    return {
        name: _array([count, *shapes[name]], values[name], input_dtypes[name]) for name in shapes
    }


def _scalar_columns(
    instances: list, input_dtypes: Mapping[str, int]
) -> dict[str, np.ndarray] | None:
    """The common case of `_from_instances` at a fraction of its cost: every element an object
    with exactly the signature's inputs, each a scalar its dtype takes as it is (a string for
    DT_STRING; a float, within float32's range for DT_FLOAT, or an int a double holds exactly,
    for DT_FLOAT and DT_DOUBLE; an int in range for the integer types; a bool for DT_BOOL). The
    tensors are the ones the general path builds; None when any element is otherwise, and the
    general path then converts it or words its error."""
    width = len(input_dtypes)
    if width == 1 and BASE64_KEY in input_dtypes:
        return None  # {"b64": ...} is a value, not an object: the general path's business
    for element in instances:
        if type(element) is not dict or len(element) != width:
            return None
    tensors = {}
    for name, dtype in input_dtypes.items():
        try:
            values = [element[name] for element in instances]
        except KeyError:
            return None  # with as many keys as inputs, an element lacking one has another
        if dtype == DT_STRING:
            for value in values:
                if type(value) is not str:
                    return None
            array = np.empty(len(values), dtype=object)
            array[:] = [v.encode("utf-8") for v in values]
            tensors[name] = array
            continue
        limits = _SCALAR_LIMITS.get(dtype)
        if limits is None:
            return None
        kinds, low, high = limits
        floats = float in kinds
        float32 = dtype == DT_FLOAT
        for value in values:
            kind = type(value)
            if kind is float and floats:
                # A finite float past float32's range becomes an infinity in the general path.
                if float32 and (value > _FLOAT32_MAX or value < -_FLOAT32_MAX):
                    if math.isfinite(value):
                        return None
            elif kind not in kinds or (kind is int and not low <= value <= high):
                return None
        tensors[name] = np.asarray(values, dtype=NUMPY_DTYPES[dtype])
    return tensors


def _from_inputs(inputs: Any, input_dtypes: Mapping[str, int]) -> dict[str, np.ndarray]:
    """FillTensorMapFromInputsMap: one value for a single input, or an object of them."""
    if not isinstance(inputs, dict) or _is_base64(inputs):
        if len(input_dtypes) > 1:
            raise invalid_argument(
                "inputs is a plain value/list, but expecting an object as multiple input "
                "tensors required as per tensorinfo_map"
            )
        (name,) = input_dtypes
        shape, flat = _tensor(inputs, input_dtypes[name])
        return {name: _array(shape, flat, input_dtypes[name])}
    tensors = {}
    for name in sorted(input_dtypes):
        if name not in inputs:
            raise invalid_argument(f"Missing named input: {name} in 'inputs' object.")
        shape, flat = _tensor(inputs[name], input_dtypes[name])
        tensors[name] = _array(shape, flat, input_dtypes[name])
    return tensors


def serialized_examples(doc: Mapping[str, Any]) -> list[bytes]:
    """The tf.Examples of a :classify or :regress request, serialized, each preceded by the
    serialized `context` (so an example's feature overrides the context's of the same name, as
    TF Serving's ExampleListWithContext does)."""
    from tensorflow.core.example import example_pb2

    context = b""
    if CONTEXT_KEY in doc:
        context = _example(doc[CONTEXT_KEY], example_pb2).SerializeToString()
    if EXAMPLES_KEY not in doc:
        raise _format_error(
            doc, "When method is classify, key 'examples' is expected and was not found"
        )
    examples = doc[EXAMPLES_KEY]
    if not isinstance(examples, list):
        raise _format_error(doc, "Expecting 'examples' value to be an list/array")
    if not examples:
        raise _format_error(doc, "'examples' value is an empty array")
    return [context + _example(item, example_pb2).SerializeToString() for item in examples]


def _example(value: Any, example_pb2) -> Any:
    """MakeExampleFromJsonObject: a JSON object of features as a tf.Example."""
    if not isinstance(value, dict):
        raise invalid_argument(f"Example must be JSON object but got JSON {_json_type(value)}")
    example = example_pb2.Example()
    for name, content in value.items():
        feature = example.features.feature[name]
        for item in content if isinstance(content, list) else [content]:
            _add_to_feature(item, name, feature)
    return example


def _add_to_feature(value: Any, name: str, feature: Any) -> None:
    """AddValueToFeature: the JSON type decides the feature's list type."""

    def expect(kind: str) -> None:
        current = feature.WhichOneof("kind")
        if current not in (None, kind):
            shown = {"bytes_list": "bytes", "float_list": "float", "int64_list": "int64"}[current]
            raise invalid_argument(
                f"Unexpected element type in feature: {name} expecting type: {shown}"
            )

    if (
        value is None
        or isinstance(value, list)
        or (isinstance(value, dict) and not _is_base64(value))
    ):
        raise invalid_argument(
            f"Feature: {name} has element with unexpected JSON type: {_json_type(value)}"
        )
    if isinstance(value, bool):
        expect("int64_list")
        feature.int64_list.value.append(1 if value else 0)
    elif isinstance(value, dict):
        expect("bytes_list")
        feature.bytes_list.value.append(_decode_base64(value))
    elif isinstance(value, str):
        expect("bytes_list")
        feature.bytes_list.value.append(value.encode("utf-8"))
    elif isinstance(value, float) or not -(1 << 63) <= value < (1 << 64):
        # A double (rapidjson holds an integer past 64 bits as one), as the float GetFloat
        # makes of it: an infinity beyond float32's range.
        expect("float_list")
        number = value if isinstance(value, float) else _int_as_double(value)
        if not -_FLOAT32_MAX <= number <= _FLOAT32_MAX:
            number = _beyond_float32(number)
        feature.float_list.value.append(number)
    else:
        expect("int64_list")
        if value >= (1 << 63):
            raise invalid_argument(
                f"Feature: {name} has uint64_t element. Only int64_t is supported."
            )
        feature.int64_list.value.append(value)


# ----------------------------------------------------------------------------- answers


def _text(value: Any) -> str:
    """A string tensor's value as JSON text: its bytes read as UTF-8, bytes that are not
    UTF-8 replaced by U+FFFD."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _nested(value: Any, convert) -> Any:
    if isinstance(value, list):
        return [_nested(v, convert) for v in value]
    return convert(value)


def json_values(name: str, array: np.ndarray) -> Any:
    """A tensor's values as nested JSON lists (a bare value for a scalar): numbers as the values
    they are (a float32 as the shortest decimal that gives it back), strings as text, and the
    strings of a tensor named `*_bytes` as {"b64": ...}. The JSON values of TF Serving's answer;
    its text is what `dumps` writes of the array itself."""
    array = np.asarray(array)
    kind = array.dtype
    if kind == np.float32:
        return array.astype(str).astype(np.float64).tolist()
    if kind == np.float64 or kind.kind in "iub":
        return array.tolist()
    if kind.kind in "OS":
        if name.endswith(BYTES_SUFFIX):
            return _nested(
                array.tolist(), lambda b: {BASE64_KEY: base64.b64encode(bytes(b)).decode("ascii")}
            )
        if array.ndim == 1:  # a string per row: no nesting to walk
            return [_text(value) for value in array.tolist()]
        return _nested(array.tolist(), _text)
    tf_name = {"float16": "half", "complex64": "complex64", "complex128": "complex128"}
    raise invalid_argument(
        f"Failed to write JSON value for tensor type: {tf_name.get(kind.name, kind.name)}"
    )


_FLOAT32 = struct.Struct("f")


def float32_text(
    value: float, _pack=_FLOAT32.pack, _unpack=_FLOAT32.unpack, _isfinite=math.isfinite
) -> str:
    """A float32 (given as the Python float of its value) as TF Serving writes it
    (WriteDecimal<float>): absl's StrCat, which is "%g"; "%.9g" when those six digits do not read
    back as the same float32; ".0" after a text with neither a point nor an exponent (so `3.0`,
    `9e+06`, `0.333333343`); NaN, Infinity and -Infinity as such. (The defaults bind what each
    call looks up: it runs once per number of every answer.)"""
    if not _isfinite(value):
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    text = format(value, "g")
    if _unpack(_pack(float(text)))[0] != value:
        text = format(value, ".9g")
    if "." not in text and "e" not in text:
        text += ".0"
    return text


def float64_text(value: float, _isfinite=math.isfinite) -> str:
    """A double as TF Serving writes it (WriteDecimal<double>): "%g", or "%.17g" when six digits
    do not give the double back; ".0" as for a float32."""
    if not _isfinite(value):
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    text = format(value, "g")
    if float(text) != value:
        text = format(value, ".17g")
    if "." not in text and "e" not in text:
        text += ".0"
    return text


def _decimal_array_text(array: Any) -> str:
    """A float32 or float64 array (or numpy scalar) as TF Serving writes it: nested lists of
    `float32_text` / `float64_text`, a bare number for a scalar."""
    shape = array.shape
    if not shape:
        return (float32_text if array.dtype.char == "f" else float64_text)(float(array))
    return _nested_text(_float_texts(array.ravel()), shape)


def _nested_text(texts: list[str], shape: Sequence[int]) -> str:
    """Numbers' texts, in row-major order, as the JSON text of nested lists of `shape`."""
    if len(shape) == 1:
        return "[" + ",".join(texts) + "]"
    if len(shape) == 2 and shape[1] == 1:  # a column: one value per row
        return "[[" + "],[".join(texts) + "]]" if texts else "[]"
    for axis in range(len(shape) - 1, -1, -1):
        size = shape[axis]
        texts = [
            "[" + ",".join(texts[group * size : (group + 1) * size]) + "]"
            for group in range(math.prod(shape[:axis]))
        ]
    return texts[0]


def _row_fragments(array: np.ndarray) -> list:
    """A float array's rows (first dimension) as TF Serving writes each, all formatted at once."""
    texts = _float_texts(array.ravel())
    if array.ndim == 1:
        return [orjson.Fragment(text) for text in texts]
    inner = array.shape[1:]
    size = math.prod(inner)
    if len(inner) == 1 and size and texts:
        # Rows of numbers: every row's text in one formatting of a row's template.
        row = "[" + ",".join(["%s"] * size) + "]"
        rows = ("\n".join([row] * array.shape[0]) % tuple(texts)).split("\n")
        return [orjson.Fragment(text) for text in rows]
    return [
        orjson.Fragment(_nested_text(texts[row * size : (row + 1) * size], inner))
        for row in range(array.shape[0])
    ]


# From this many values on, `_float_texts` formats an array in a few passes over all of it
# rather than number by number.
_FLOAT_TEXTS_AT_ONCE = 16
_SPECIAL_TEXT = {math.inf: "Infinity", -math.inf: "-Infinity"}


def _float_texts(flat: np.ndarray) -> list[str]:
    """`float32_text` (float32) or `float64_text` (float64) of each value of a flat array; for
    many values with numpy's help: which values "%g" gives back is decided for all at once, all
    are formatted in one string formatting ("%g", or "%.9g" / "%.17g" after it), and ".0" and
    the non-finite values' words are put where they apply."""
    values = flat.tolist()
    single = flat.dtype.char == "f"
    if len(values) < _FLOAT_TEXTS_AT_ONCE:
        text = float32_text if single else float64_text
        return [text(v) for v in values]
    finite = np.isfinite(flat)
    if single:  # every value in one formatting, each with the format that gives it back
        six = _six_digits_suffice(flat).tolist()
        formats = "\n".join(["%g" if short else "%.9g" for short in six])
        texts = (formats % tuple(values)).split("\n")
    else:  # doubles: "%g" of every value, read back to find those it does not give back
        texts = ("%g\n" * len(values) % tuple(values)).split("\n")
        texts.pop()
        redo = np.flatnonzero((np.array(texts, dtype=np.float64) != flat) & finite).tolist()
        for index in redo:
            texts[index] = format(values[index], ".17g")
    with np.errstate(invalid="ignore"):  # trunc of NaN and infinities, masked out below
        whole = finite & (flat == np.trunc(flat))
    for index in np.flatnonzero(whole).tolist():
        if "e" not in texts[index]:  # "%g" of a whole number has no point
            texts[index] += ".0"
    if not finite.all():
        for index in np.flatnonzero(~finite).tolist():
            texts[index] = _SPECIAL_TEXT.get(values[index], "NaN")
    return texts


def _six_digits_suffice(flat: np.ndarray) -> np.ndarray:
    """Whether "%g" (six significant digits) of each float32 reads back as it: whether its value
    rounded to six digits, computed in doubles, converts back to it. (A float32 is within a
    ten-millionth of its shortest decimal, so when one of at most six digits exists, it is the
    six-digit rounding, far from a rounding tie; when none exists, no six-digit decimal comes
    back, whatever the doubles' error.)"""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # zeros, NaN, infinities
        values = flat.astype(np.float64)
        scale = 10.0 ** (5 - np.floor(np.log10(np.abs(values))))
        rounded = (np.round(values * scale) / scale).astype(np.float32)
    return rounded == flat


# Arrays and numpy scalars an answer may hold for `dumps` to write (numbers and bools).
_NATIVE_KINDS = frozenset(
    np.dtype(t)
    for t in (
        np.float32, np.float64, np.int8, np.int16, np.int32, np.int64,
        np.uint8, np.uint16, np.uint32, np.uint64, np.bool_,
    )
)  # fmt: skip


def _answer_values(name: str, array: np.ndarray) -> Any:
    """A tensor's values for an answer `dumps` writes: a numeric array as it is (`dumps` writes
    it as TF Serving does), anything else as json_values."""
    if type(array) is np.ndarray and array.dtype in _NATIVE_KINDS:
        return array
    return json_values(name, array)


def _answer_rows(name: str, array: np.ndarray) -> list:
    """A tensor's rows for a row-format answer of several outputs: the text of each row of a
    float array (formatted together, not row by row through `dumps`), other numbers as plain
    lists, anything else as json_values."""
    if type(array) is np.ndarray and array.dtype in _NATIVE_KINDS:
        if array.dtype.char in "fd":
            return _row_fragments(array)
        return array.tolist()
    return json_values(name, array)


def predict_answer(
    outputs: Mapping[str, np.ndarray], request_format: str, arrays: bool = False
) -> dict:
    """The :predict answer: `predictions` (row) or `outputs` (columnar), bare for a single
    output tensor, by name for several (MakeRowFormatJsonFromTensors and
    MakeColumnarFormatJsonFromTensors); a batch of no rows is `{"predictions": []}`. `arrays`:
    numeric values stay numpy arrays (and their rows numpy values), which `dumps` writes as TF
    Serving writes them; else every value is plain JSON (json_values)."""
    if not outputs:
        raise invalid_argument("Cannot convert empty tensor map to JSON")
    values = _answer_values if arrays else json_values
    names = sorted(outputs)
    if request_format == COLUMNAR:
        if len(names) == 1:
            return {"outputs": values(names[0], outputs[names[0]])}
        return {"outputs": {name: values(name, outputs[name]) for name in names}}
    batch = -1
    for name in names:
        shape = np.shape(outputs[name])
        if not shape:
            raise invalid_argument(f"Tensor name: {name} has no shape information ")
        if batch >= 0 and shape[0] != batch:
            raise invalid_argument(
                f"Tensor name: {name} has inconsistent batch size: {shape[0]} expecting: {batch}"
            )
        batch = shape[0]
    if len(names) == 1:
        return {"predictions": values(names[0], outputs[names[0]])}
    rows = _answer_rows if arrays else json_values
    columns = [rows(name, outputs[name]) for name in names]
    return {
        "predictions": [dict(zip(names, row, strict=True)) for row in zip(*columns, strict=True)]
    }


def classify_answer(labels: np.ndarray | None, scores: np.ndarray | None) -> dict:
    """The :classify answer: per example, [label, score] per class; a label is "" without a
    `classes` output, a score 0.0 without `scores` (MakeJsonFromClassificationResult). Scores
    are their text as TF Serving writes them (`float32_text`), for `dumps`."""
    rows = (labels if labels is not None else scores).shape[0]
    classes = (labels if labels is not None else scores).shape[1]
    label_values = json_values("classes", labels) if labels is not None else None
    score_texts = None
    if scores is not None:
        score_texts = [orjson.Fragment(t) for t in _float_texts(np.ravel(scores))]
    results = []
    for i in range(rows):
        results.append(
            [
                [
                    label_values[i][c] if label_values is not None else "",
                    score_texts[i * classes + c] if score_texts is not None else 0.0,
                ]
                for c in range(classes)
            ]
        )
    return {"results": results}


def regress_answer(values: np.ndarray) -> dict:
    """The :regress answer: one value per example (MakeJsonFromRegressionResult), a float32
    array for `dumps` to write as TF Serving does."""
    return {"results": np.reshape(np.asarray(values, np.float32), [-1])}


def dumps(answer: Mapping[str, Any]) -> bytes:
    """An answer's JSON bytes, numbers written as TF Serving writes them: numpy arrays and
    values in it (`predict_answer(..., arrays=True)`) by `float32_text` / `float64_text`, plain
    floats in their shortest form, NaN and Infinity as such."""
    try:
        payload = orjson.dumps(answer, default=_numpy_json)
    except orjson.JSONEncodeError:
        payload = b"null"  # an integer past 64 bits, say: written below
    if b"null" not in payload:
        return payload
    # orjson writes a plain NaN or infinity as null (answers hold no null of their own; a
    # string holding "null" only costs the walk).
    return orjson.dumps(_with_fragments(answer), default=_numpy_json)


def _numpy_json(value: Any) -> Any:
    """orjson's `default`: a numpy array or value in an answer, written as TF Serving writes it."""
    if isinstance(value, (np.ndarray, np.generic)):
        if value.dtype.char in "fd":  # float32, float64
            return orjson.Fragment(_decimal_array_text(value))
        if value.dtype in _NATIVE_KINDS:
            return orjson.Fragment(orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY))
        return json_values("", np.asarray(value))
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _with_fragments(value: Any) -> Any:
    """A plain answer with what orjson cannot write as JSON (non-finite floats, integers past 64
    bits) replaced by their text."""
    if isinstance(value, dict):
        return {key: _with_fragments(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_with_fragments(item) for item in value]
    if type(value) is float and not math.isfinite(value):
        return orjson.Fragment(float64_text(value))
    if type(value) is int and not -(1 << 63) <= value < (1 << 64):
        return orjson.Fragment(str(value))
    return value


def error_body(error: ServingError) -> bytes:
    """TF Serving's error body: `{"error": "<message>"}`."""
    return dumps({"error": error.message})
