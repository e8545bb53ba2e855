"""The config against the schema: strict numbers, and a message per error that names the key
and says what is valid (jsonschema's own say neither well); YAML syntax errors with file and
line; the schema itself, with a block for each study registered by a module of its own."""

from __future__ import annotations

import copy
import difflib
import math
from collections.abc import Mapping
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

import jsonschema
import yaml

from .. import settings as st
from ..estimators import ESTIMATORS, described
from ..settings import REGISTRY_NAMES, Architecture
from ..studies import REGISTRY


class _StudyBlocks(Mapping):
    """Each study's settings class, by the study's name: read from the registry each time, so
    that a study registered after this module was imported (the config's study_modules) has
    its block too."""

    def __getitem__(self, name: str) -> type:
        return REGISTRY[name].settings

    def __iter__(self):
        return iter(REGISTRY)

    def __len__(self) -> int:
        return len(REGISTRY)


STUDY_SETTINGS: Mapping[str, type] = _StudyBlocks()  # the study blocks
# the top-level keys besides blocks
TOP_KEYS = ("results", "keep_models", "study_modules", "architectures")


class ConfigError(ValueError):
    """The config is invalid; the message names the key and how to fix it."""


def _finite_number(_checker, x) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _integer(_checker, x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _validator_class() -> type:
    base = jsonschema.Draft202012Validator
    checker = base.TYPE_CHECKER.redefine_many({"number": _finite_number, "integer": _integer})
    return jsonschema.validators.extend(base, type_checker=checker)


def _key(path) -> str:
    return ".".join(str(p) for p in path) or "(top level)"


def _yaml(x: Any) -> str:
    if isinstance(x, float) and not math.isfinite(x):
        return ".nan" if math.isnan(x) else (".inf" if x > 0 else "-.inf")
    return repr(x)


def _wants(err, kind: str) -> bool:
    """Whether the failing schema (or a branch of its anyOf) asks for type `kind`."""
    schemas = [err.schema, *[e.schema for e in (err.context or [])]]
    return any(s.get("type") == kind for s in schemas if isinstance(s, dict))


def _block_class(path: list) -> type | None:
    """The settings dataclass of the block at a config path (for its valid keys), found by
    walking the dataclasses' type hints from the top-level blocks; a field whose value holds
    overrides of a block says which in its metadata (`block`)."""
    if not path:
        return None
    top = {**st.BLOCKS, **STUDY_SETTINGS, "architectures": dict[str, Architecture]}
    hint: Any = top.get(path[0])
    for part in path[1:]:
        if get_origin(hint) is dict:
            hint = get_args(hint)[1]
        elif is_dataclass(hint):
            field = {f.name: f for f in fields(hint)}.get(part)
            hint = (
                None if field is None else field.metadata.get("block") or get_type_hints(hint)[part]
            )
        else:
            return None
    return hint if isinstance(hint, type) and is_dataclass(hint) else None


def _unknown_keys(err) -> str | None:
    path = list(err.absolute_path)
    cls = _block_class(path)
    allowed = [f.name for f in fields(cls)] if cls else list(err.schema.get("properties", {}))
    if not path:
        allowed = [*TOP_KEYS, *st.BLOCKS, *STUDY_SETTINGS]
    instance = err.instance if isinstance(err.instance, dict) else {}
    hints = []
    for k in instance:
        if k in allowed:
            continue
        close = difflib.get_close_matches(str(k), allowed, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        if not path and not close and isinstance(instance[k], dict):  # a block, maybe a study
            hint = (
                " (a study of one's own is a key once its module registers it: name that "
                "module under study_modules, e.g. study_modules: [mystudies])"
            )
        hints.append(f"unknown key {'.'.join([*map(str, path), str(k)])!r}{hint}")
    if not hints:  # unevaluatedProperties also fires for a known key whose value is invalid
        return None  # that value's own error says what is wrong
    return "; ".join(hints) + f". Valid keys here: {', '.join(allowed)}"


def _ref(schema: dict, node: dict) -> dict:
    while "$ref" in node:
        node = {
            **schema["$defs"][node["$ref"].split("/")[-1]],
            **{k: v for k, v in node.items() if k != "$ref"},
        }
    return node


def _valid(schema: dict, node: dict) -> str:
    """What a schema node accepts, in words: "null", "an integer >= 1", "a list of ..."."""
    node = _ref(schema, node)
    if "enum" in node:
        return "one of " + ", ".join(map(str, node["enum"]))
    if "const" in node:  # the one text a key takes beside its other kinds (grouped: auto)
        return str(node["const"])
    if "anyOf" in node:
        return " or ".join(_valid(schema, n) for n in node["anyOf"])
    kind = node.get("type")
    bounds = [
        f"{op} {node[k]}"
        for k, op in (
            ("minimum", ">="),
            ("exclusiveMinimum", ">"),
            ("maximum", "<="),
            ("exclusiveMaximum", "<"),
        )
        if k in node
    ]
    limit = f" {' and '.join(bounds)}" if bounds else ""
    if kind == "null":
        return "null"
    if kind == "integer":
        return f"an integer{limit}"
    if kind == "number":
        return f"a number{limit}"
    if kind == "boolean":
        return "true or false"
    if kind == "string":
        pattern = node.get("pattern", "")
        return (
            "a name of letters, digits, '_' and '-'" if pattern.startswith("^[A-Za-z") else "text"
        )
    if kind == "array":
        items = node.get("items")
        size = ""
        if node.get("minItems") == node.get("maxItems") and "minItems" in node:
            size = f"{node['minItems']} "
        return f"a list of {size}{_plural(_valid(schema, items))}" if items else "a list"
    return kind or "a value of another form"


def _plural(words: str) -> str:
    for one, many in (
        ("an integer", "integers"),
        ("a number", "numbers"),
        ("a list", "lists"),
        ("a name", "names"),
        ("text", "texts"),
    ):
        if words.startswith(one):
            return many + words[len(one) :]
    return words


def _message(err, schema: dict | None = None) -> str | None:
    path = list(err.absolute_path)
    key, x = _key(path), err.instance
    if err.validator in ("additionalProperties", "unevaluatedProperties"):
        return _unknown_keys(err)
    if isinstance(x, float) and not math.isfinite(x):
        return (
            f"config key {key!r}: {_yaml(x)} is not a finite number (NaN and infinity are "
            "refused here: no setting of this key means them)"
        )
    if isinstance(x, float) and x.is_integer() and _wants(err, "integer"):
        return f"config key {key!r}: {x!r} is not an integer: write {int(x)}"
    if isinstance(x, str) and _wants(err, "number"):
        try:
            float(x)
            return (
                f"config key {key!r}: {x!r} is text, not a number (YAML reads a number like "
                f"1e-5 without a decimal point as text: write {float(x)!r})"
            )
        except ValueError:
            pass
    if err.validator == "pattern" and err.schema.get("pattern", "").startswith("^[A-Za-z0-9_-]"):
        where = f"{key}.{x}" if "propertyNames" in err.schema_path else key
        return (
            f"config key {where!r}: {x!r} is not a valid architecture name: use letters, "
            "digits, '_' and '-', at most 64 characters (names become file names)"
        )
    if err.validator == "anyOf" and schema is not None:
        return f"config key {key!r}: {_yaml(x)} is not valid here; use {_valid(schema, err.schema)}"
    return f"config key {key!r}: {err.message}"


class _UniqueKeys(yaml.SafeLoader):
    """The safe loader, refusing a key given twice in one mapping."""

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "in the mapping",
                    node.start_mark,
                    f"the key {key!r} is given twice (at lines {seen[key] + 1} and "
                    f"{key_node.start_mark.line + 1}); YAML would keep the last without a word: "
                    "keep one",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


def check_yaml(path: str | Path) -> None:
    """Raise ConfigError naming the file, line and column of a YAML syntax error in `path`
    (Snakemake's own message names neither), or of a key given twice in one mapping (YAML
    keeps the last without a word); nothing when the file is absent."""
    path = Path(path)
    if not path.is_file():
        return
    try:
        yaml.load(path.read_text(), Loader=_UniqueKeys)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        context, start = getattr(e, "context", None), getattr(e, "context_mark", None)
        if context and start:
            context += f" that starts at line {start.line + 1}, column {start.column + 1}"
        raise ConfigError(
            f"{path}{where}: not valid YAML: {problem}" + (f" ({context})" if context else "")
        ) from None


def load_schema(schema_path: str | Path) -> dict:
    """The config schema: the file's, and a block for each study registered by a module of its
    own (its entry's `schema` beside `$defs/study`)."""
    # libyaml's loader where PyYAML has it (its wheels do): every Snakemake process reads the
    # schema, 0.04 CPU-s with it against 0.005 (the same dict, tested)
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    schema = yaml.load(Path(schema_path).read_text(), Loader=loader)
    estimator = schema["$defs"]["nad_settings"]["properties"]["estimator"]
    estimator["enum"] = list(ESTIMATORS)  # with what each estimates, from their registry
    estimator["description"] = " ".join(estimator["description"].split()) + f" {described()}."
    archs = schema["properties"]["architectures"]
    said = " ".join(archs["description"].split()).split(" (their names are added")[0]
    archs["description"] = f"{said}: {', '.join(REGISTRY_NAMES)}."
    for name, entry in REGISTRY.items():
        if name not in schema["properties"]:
            schema["properties"][name] = {
                "description": entry.about,
                "allOf": [{"$ref": "#/$defs/study"}],
                "properties": dict(entry.schema),
                "unevaluatedProperties": False,
            }
    return schema


def validate(config: dict, schema_path: str | Path) -> dict:
    """A deep copy of `config`, checked against the schema (no defaults filled)."""
    schema = load_schema(schema_path)
    cfg = copy.deepcopy(dict(config))
    errors = sorted(
        _validator_class()(schema).iter_errors(cfg), key=lambda e: list(map(str, e.absolute_path))
    )
    if errors:
        found = [_message(e, schema) for e in errors]
        messages = list(dict.fromkeys(m for m in found if m)) or [errors[0].message]
        raise ConfigError("invalid config:\n  " + "\n  ".join(messages))
    return cfg
