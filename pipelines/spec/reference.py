"""Generates the spec reference (`docs/spec-reference.md`) and the JSON Schema of a spec file
(`docs/spec.schema.json`) from the spec models and the component table.

Both files are derived, never edited by hand: a key's type, default and description live once,
on its pydantic field in `pipelines/spec/models.py`, and a component type's needs and provides
in `pipelines/spec/components.py`. `make docs` (`python -m pipelines.spec.reference`) rewrites
them; `--check` exits 1 naming a stale one, and `tests/unit/test_spec_reference.py` fails while
either is stale.

The schema lets editors that run yaml-language-server complete and check a spec as it is typed:
each spec's first line, `MODELINE`, points them at it. This module imports no TensorFlow or TFX.
"""

from __future__ import annotations

import argparse
import enum
import inspect
import json
import sys
import typing
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from pipelines.core.paths import FRAMEWORK_ROOT
from pipelines.spec.components import COMPONENT_TYPES, KNOWN_TYPES, Orchestrator
from pipelines.spec.models import DEFAULT_COMPONENTS, ComponentRef, PipelineSpec

DOCS_DIR = FRAMEWORK_ROOT / "docs"
REFERENCE_FILE = "spec-reference.md"
SCHEMA_FILE = "spec.schema.json"

# pydantic writes Draft 2020-12. Its output here uses only keywords Draft 7 also has (`$defs` is
# only a `$ref` target), which is what yaml-language-server validates with.
SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_ID = "urn:conveyor:spec.schema.json"
SCHEMA_TITLE = "Conveyor pipeline spec (specs/<name>.yaml)"
# The first line of every spec under specs/: the path is relative to the spec file.
MODELINE = "# yaml-language-server: $schema=../docs/spec.schema.json"

IDENTIFIER_PATTERN = "^[A-Za-z_][A-Za-z0-9_]*$"

# Keys whose allowed values a field validator checks against a table, which pydantic cannot put
# in the schema by itself: (model, key) -> (allowed values, how the reference names them).
_CHOICES: dict[tuple[str, str], tuple[tuple[str, ...], str]] = {
    (ComponentRef.__name__, "type"): (KNOWN_TYPES, "a [component type](#component-types)"),
}


def spec_models() -> list[tuple[type[BaseModel], str]]:
    """Every model reachable from PipelineSpec, in spec order (depth first), with the key path
    where a spec first uses it: `[]` stands for each item of a list, `<name>` for each value of
    a mapping, and "" for the top level of the file."""
    found: list[tuple[type[BaseModel], str]] = []

    def visit(model: type[BaseModel], path: str) -> None:
        if any(model is seen for seen, _ in found):
            return
        found.append((model, path))
        for name, field in model.model_fields.items():
            key = field.alias or name
            for nested, suffix in _models_in(field.annotation):
                visit(nested, f"{path}.{key}{suffix}" if path else f"{key}{suffix}")

    visit(PipelineSpec, "")
    return found


def _models_in(annotation: Any, suffix: str = "") -> Iterator[tuple[type[BaseModel], str]]:
    """The models inside a field's annotation, each with how it is reached (`[]`, `.<name>`)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation, suffix
        return
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        yield from _models_in(args[0], suffix)
    elif origin is dict:
        yield from _models_in(args[1], suffix + ".<name>")
    elif origin in (tuple, list):
        for arg in args:
            if arg is not Ellipsis:
                yield from _models_in(arg, suffix + "[]")
    else:
        for arg in args:
            yield from _models_in(arg, suffix)


def json_schema() -> dict[str, Any]:
    """The JSON Schema of one spec file, as its YAML keys are spelled (`schema`, not `schema_`).

    It checks one file's keys, types and ranges; rules across keys (a component's needs,
    `schema.path` with `source: file`...) stay with `conveyor validate`.
    """
    schema = PipelineSpec.model_json_schema(by_alias=True, mode="validation")
    for (model, key), (allowed, _) in _CHOICES.items():
        schema["$defs"][model]["properties"][key]["enum"] = list(allowed)
    _closed_mappings(schema)
    schema.update({"$schema": SCHEMA_DIALECT, "$id": SCHEMA_ID, "title": SCHEMA_TITLE})
    return schema


def _closed_mappings(node: Any) -> None:
    """Mappings keyed by identifiers (`data.drift`...) accept no other key, as the models do:
    pydantic writes only `patternProperties`, which lets any other key through."""
    if isinstance(node, dict):
        if "patternProperties" in node and "properties" not in node:
            node.setdefault("additionalProperties", False)
        for value in node.values():
            _closed_mappings(value)
    elif isinstance(node, list):
        for value in node:
            _closed_mappings(value)


def schema_text() -> str:
    """`json_schema()` as written to docs/spec.schema.json: sorted keys, so it diffs stably."""
    return json.dumps(json_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _one_line(text: str | None) -> str:
    return " ".join(inspect.cleandoc(text or "").split())


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return text.replace("|", "\\|")


def _flow(value: Any) -> str:
    """A plain value as one line of YAML flow style, as it would be written in a spec."""
    text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=10**6)
    return text.removesuffix("\n...\n").strip()


def _plain(value: Any) -> Any:
    """A default as plain YAML data; a model only with the keys a spec would have to write."""
    if isinstance(value, BaseModel):
        return _minimal(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def _minimal(model: BaseModel) -> dict[str, Any]:
    """The keys of `model` that differ from their defaults, less those its validators derive
    (a component's `id` is its `type` unless given)."""
    data = {}
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        if field.is_required() or value != field.get_default(call_default_factory=True):
            data[field.alias or name] = _plain(value)
    for key in list(data):
        rest = {k: v for k, v in data.items() if k != key}
        try:
            derived = type(model).model_validate(rest) == model
        except ValidationError:
            derived = False
        if derived:
            data = rest
    return data


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if isinstance(value, BaseModel) and not _minimal(value):
        return "each key's default"
    return f"`{_flow(_plain(value))}`"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _type(node: dict[str, Any], defs: dict[str, Any]) -> str:
    """How the reference names the type of one JSON Schema node."""
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        target = defs[name]
        if "enum" in target:
            return "one of " + ", ".join(f"`{v}`" for v in target["enum"])
        return f"[{name}](#{name.lower()})"
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        text = " or ".join(_type(o, defs) for o in options)
        return text + " or null" if len(options) < len(node["anyOf"]) else text
    kind = node.get("type")
    if kind == "array" and "prefixItems" in node:  # a fixed-length tuple, e.g. [start, end]
        return "[" + ", ".join(_type(item, defs) for item in node["prefixItems"]) + "]"
    if kind == "array":
        text = f"list of {_type(node.get('items', {}), defs)}"
    elif kind == "object":
        values = node.get("additionalProperties") or next(
            iter(node.get("patternProperties", {}).values()), {}
        )
        values = values if isinstance(values, dict) else {}  # `true`: any value (dict[str, Any])
        keys = "identifier" if IDENTIFIER_PATTERN in node.get("patternProperties", {}) else "key"
        text = f"mapping of {keys} to {_type(values, defs) if values else 'any'}"
    elif kind == "string" and node.get("pattern") == IDENTIFIER_PATTERN:
        text = "identifier"
    elif kind == "string" and node.get("format") == "date":
        text = "date (YYYY-MM-DD)"
    elif kind == "string" and "pattern" in node:
        text = f"string matching `{node['pattern']}`"
    else:
        text = kind or "any"
    bounds = [
        f"{sign} {_number(node[key])}"
        for key, sign in (
            ("exclusiveMinimum", ">"),
            ("minimum", ">="),
            ("exclusiveMaximum", "<"),
            ("maximum", "<="),
        )
        if key in node
    ]
    if "minItems" in node:
        bounds.append(f"at least {node['minItems']}")
    return f"{text} ({', '.join(bounds)})" if bounds else text


def _model_section(
    model: type[BaseModel], path: str, schema: dict[str, Any], defs: dict[str, Any]
) -> list[str]:
    node = schema if model is PipelineSpec else defs[model.__name__]
    where = "The top level of a spec file." if not path else f"Key: `{path}`."
    lines = [f"## {model.__name__}", "", where, "", _one_line(model.__doc__), ""]
    lines += ["| key | type | default | description |", "|---|---|---|---|"]
    for name, field in model.model_fields.items():
        key = field.alias or name
        choices = _CHOICES.get((model.__name__, key))
        kind = choices[1] if choices else _type(node["properties"][key], defs)
        cells = (f"`{key}`", kind, _default(field), _one_line(field.description))
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return lines + [""]


def _component_section() -> list[str]:
    others = [o for o in Orchestrator if o is not Orchestrator.LOCAL]
    chain = ", ".join(f"`{t}`" for t in DEFAULT_COMPONENTS)
    lines = [
        "## Component types",
        "",
        "What a spec's `components` list may name, from `pipelines/spec/components.py`. Nodes "
        "pass channels to each other by role: a node may only need roles that a node listed "
        "before it provides (`conveyor validate` names the component to add otherwise). A spec "
        f"without `components` gets the reference chain: {chain}. A built-in's outputs are "
        "named after the roles it provides, so an entry's `inputs` can name them "
        "(`csv_example_gen.examples`); an entry may also name a team's own TFX component by "
        "import path (`component:`, see [user-code.md](user-code.md#custom-components)).",
        "",
        "| type | what it does | needs | provides | "
        + " | ".join(f"on {o.value.capitalize()}" for o in others)
        + " |",
        "|---|---|---|---|" + "---|" * len(others),
    ]
    for row in COMPONENT_TYPES.values():
        needs = [f"`{role}`" for role in row.needs]
        needs += [f"`{n.role}` (for `{n.key}`)" for n in row.needs_when]
        cells = [
            f"`{row.name}`",
            _one_line(row.summary),
            ", ".join(needs) or "nothing",
            ", ".join(f"`{role}`" for role in row.provides) or "nothing",
        ]
        cells += [row.on_target.get(o, "as locally") for o in others]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return lines + [""]


_INTRO = f"""\
# Pipeline spec reference

Generated from `pipelines/spec/models.py` and `pipelines/spec/components.py` by `make docs`
(`python -m pipelines.spec.reference`), together with `docs/{SCHEMA_FILE}`: edit those
modules, not this file. `tests/unit/test_spec_reference.py` fails while either file is stale.

A pipeline is one spec file, `specs/<name>.yaml`. `conveyor validate <name>` loads it
under each profile: defaults < the spec < Conveyor's `pipelines/profiles/<profile>.yaml` < the
project's `configs/<profile>.yaml` < `--set key.path=value`, merged key by key. Every key
below is checked: an unknown key, a wrong type, a value out of range or a broken rule across
keys is an error that names the file and the key.

## Editor support

`docs/{SCHEMA_FILE}` is the JSON Schema of a spec file. Each spec's first line points editors
at it, by a path relative to the spec file:

```yaml
{MODELINE}
```

Editors that run Red Hat's yaml-language-server read this comment: VS Code with the YAML
extension (`redhat.vscode-yaml`), and others that use it as their YAML language server (Neovim's
`yamlls`, for one). With it they complete keys and enum values, show each key's description on
hover, and mark unknown keys, wrong types and values out of range as you type. Start a new spec
with the same line; to YAML itself it is a comment. It is not for the profiles in `configs/`
and `pipelines/profiles/`: they are partial overlays, which the schema's required keys would
flag. The schema checks one file; rules across keys (a component's needs, `schema.path` with
`source: file`, `data.window_spans` with `data.span_pattern`...) are checked by `conveyor
validate`.

## Reading the tables

`identifier`: letters, digits and `_`, not starting with a digit. In a key path, `[]` is each
item of a list and `<name>` each value of a mapping. `null` (or leaving the key out) means unset.
A default of "each key's default" means the section may be left out.
"""


def reference_text() -> str:
    """The Markdown written to docs/spec-reference.md."""
    schema = PipelineSpec.model_json_schema(by_alias=True, mode="validation")
    defs = schema.get("$defs", {})
    lines = [_INTRO]
    for model, path in spec_models():
        lines += _model_section(model, path, schema, defs)
    lines += _component_section()
    return "\n".join(lines).rstrip("\n") + "\n"


def generated(docs_dir: Path = DOCS_DIR) -> dict[Path, str]:
    """Each generated file and the text it should hold now."""
    return {docs_dir / REFERENCE_FILE: reference_text(), docs_dir / SCHEMA_FILE: schema_text()}


def stale_files(docs_dir: Path = DOCS_DIR) -> list[Path]:
    """The generated files that are missing or differ from what the generator writes now."""
    return [
        path
        for path, text in generated(docs_dir).items()
        if not path.is_file() or path.read_text(encoding="utf-8") != text
    ]


def main(argv: Sequence[str] | None = None, docs_dir: Path = DOCS_DIR) -> int:
    """Rewrites both files, or with `--check` reports the stale ones and returns 1."""
    parser = argparse.ArgumentParser(
        prog="python -m pipelines.spec.reference",
        description=f"Writes {REFERENCE_FILE} and {SCHEMA_FILE} under docs/ from pipelines/spec/.",
    )
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if a file is stale"
    )
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files(docs_dir)
        for path in stale:
            print(f"{_shown(path)} is stale: run `make docs`", file=sys.stderr)
        return 1 if stale else 0
    docs_dir.mkdir(parents=True, exist_ok=True)
    for path, text in generated(docs_dir).items():
        path.write_text(text, encoding="utf-8")
        print(f"wrote {_shown(path)}")
    return 0


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(FRAMEWORK_ROOT))
    except ValueError:
        return str(path)


if __name__ == "__main__":
    sys.exit(main())
