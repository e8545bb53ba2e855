"""The config: validation against the schema with strict numbers, defaults from nadpipe.settings,
the checks a schema cannot express, and the typed `Config` the workflow plans from.

The Snakefile calls `load_config` once at parse time, so a config that cannot mean anything
stops the run before any job, with a message naming the key. Loading needs no torch unless a
model has to be checked (user models, keyword arguments, other input shapes).
"""

from __future__ import annotations

import copy
import difflib
import math
from dataclasses import dataclass, fields, is_dataclass, replace
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from . import settings as st
from .settings import REGISTRY_NAMES, Architecture, NadConfig, Shape, StudySettings
from .studies import REGISTRY

STUDY_SETTINGS = {name: entry.settings for name, entry in REGISTRY.items()}  # the study blocks

NAME_PATTERN = r"[A-Za-z0-9_-]{1,64}"


class ConfigError(ValueError):
    """The config is invalid; the message names the key and how to fix it."""


# -- schema validation ------------------------------------------------------------------------


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


# the settings class of each block, by path pattern ("*" = any name), for the valid keys
def _block_class(path: list) -> type | None:
    if not path:
        return None
    head = path[0]
    if head in STUDY_SETTINGS:
        if len(path) == 1:
            return STUDY_SETTINGS[head]
        if path[1] == "train" and len(path) == 2 or path[1] == "train_per_arch" and len(path) == 3:
            return st.TrainSettings
        return None
    if head == "architectures" and len(path) == 2:
        return Architecture
    if head == "architectures" and len(path) == 3 and path[2] == "nads":
        return NadConfig
    nested = {
        "cross_section": st.CrossSection,
        "transitions": st.Transitions,
        "nad_bands": st.NadBands,
    }
    if head == "analysis" and len(path) == 2:
        return nested.get(path[1])
    return st.BLOCKS.get(head) if len(path) == 1 else None


def _unknown_keys(err) -> str | None:
    path = list(err.absolute_path)
    cls = _block_class(path)
    allowed = [f.name for f in fields(cls)] if cls else list(err.schema.get("properties", {}))
    if not path:
        allowed = list(st.BLOCKS) + list(STUDY_SETTINGS) + ["architectures"]
    instance = err.instance if isinstance(err.instance, dict) else {}
    hints = []
    for k in instance:
        if k in allowed:
            continue
        close = difflib.get_close_matches(str(k), allowed, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        hints.append(f"unknown key {'.'.join([*map(str, path), str(k)])!r}{hint}")
    if not hints:  # unevaluatedProperties also fires for a known key whose value is invalid
        return None  # that value's own error says what is wrong
    return "; ".join(hints) + f". Valid keys here: {', '.join(allowed)}"


def _ref(schema: dict, node: dict) -> dict:
    while "$ref" in node:
        node = {**schema["$defs"][node["$ref"].split("/")[-1]], **{k: v for k, v in node.items()
                                                                   if k != "$ref"}}  # fmt: skip
    return node


def _valid(schema: dict, node: dict) -> str:
    """What a schema node accepts, in words: "null", "an integer >= 1", "a list of ..."."""
    node = _ref(schema, node)
    if "enum" in node:
        return "one of " + ", ".join(map(str, node["enum"]))
    if "anyOf" in node:
        return " or ".join(_valid(schema, n) for n in node["anyOf"])
    kind = node.get("type")
    bounds = [f"{op} {node[k]}" for k, op in (("minimum", ">="), ("exclusiveMinimum", ">"),
              ("maximum", "<="), ("exclusiveMaximum", "<")) if k in node]  # fmt: skip
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
    for one, many in (("an integer", "integers"), ("a number", "numbers"), ("a list", "lists"),
                      ("a name", "names"), ("text", "texts")):  # fmt: skip
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


def check_yaml(path: str | Path) -> None:
    """Raise ConfigError naming the file, line and column of a YAML syntax error in `path`
    (Snakemake's own message names neither); nothing when the file is absent."""
    path = Path(path)
    if not path.is_file():
        return
    try:
        yaml.safe_load(path.read_text())
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


def validate(config: dict, schema_path: str | Path) -> dict:
    """A deep copy of `config`, checked against the schema (no defaults filled)."""
    schema = yaml.safe_load(Path(schema_path).read_text())
    cfg = copy.deepcopy(dict(config))
    errors = sorted(
        _validator_class()(schema).iter_errors(cfg), key=lambda e: list(map(str, e.absolute_path))
    )
    if errors:
        found = [_message(e, schema) for e in errors]
        messages = list(dict.fromkeys(m for m in found if m)) or [errors[0].message]
        raise ConfigError("invalid config:\n  " + "\n  ".join(messages))
    return cfg


# -- typed settings from validated data --------------------------------------------------------


def _tuples(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_tuples(x) for x in v)
    return v


def _build(default: Any, data: dict) -> Any:
    """The settings `default` with the values of `data` put in (nested blocks merged, lists as
    tuples, dict keys in sorted order so that the same settings print the same)."""
    changes = {}
    for f in fields(default):
        if f.name not in data:
            continue
        old, new = getattr(default, f.name), data[f.name]
        if is_dataclass(old):
            changes[f.name] = _build(old, new)
        elif isinstance(old, Shape):
            changes[f.name] = Shape(*new)
        elif isinstance(old, dict):
            changes[f.name] = dict(sorted(new.items()))
        else:
            changes[f.name] = _tuples(new)
    return replace(default, **changes)


@dataclass(frozen=True)
class Config:
    """The validated config with every default filled in (see nadpipe.settings)."""

    architectures: dict[str, Architecture]
    nads: NadConfig
    analysis: st.AnalysisSettings
    cifar10: st.CifarSettings
    gpus: st.GpuSettings
    studies: dict[str, StudySettings]
    results: str | None = None  # the results folder; None: results_root derives it

    def arch(self, name: str) -> Architecture:
        """The architecture's entry, or a registry model's default entry."""
        entry = self.architectures.get(name) or Architecture(model=name)
        return entry if entry.model else replace(entry, model=name)

    def nad_source(self, name: str) -> str:
        """The architecture whose NADs `name` uses."""
        return self.arch(name).nads_from or name

    def nad_config(self, name: str) -> NadConfig:
        """The NAD settings of the architecture `name` (its own NADs: no nads_from)."""
        return _build(self.nads, self.arch(name).nads)

    def nad_shape(self, name: str) -> Shape:
        """The shape of the NADs `name` uses (its source's input shape)."""
        return self.arch(self.nad_source(name)).shape

    def enabled(self) -> list[str]:
        return [s for s, v in self.studies.items() if v.enabled]

    def resolved(self) -> dict:
        """The config as plain data with every default filled in (results/config.yaml): the
        architectures that the enabled studies use (and those whose NADs they take), each with
        its model named; entries no enabled study uses are left out."""
        used = {a for s in self.enabled() for a in self.studies[s].architectures}
        used |= {self.nad_source(a) for a in used}
        out = {"architectures": {a: st.plain(self.arch(a)) for a in sorted(used)}}
        for block in st.BLOCKS:
            out[block] = st.plain(getattr(self, block))
        for study, s in self.studies.items():
            out[study] = st.plain(s)
        return out


def build(cfg: dict) -> Config:
    archs = {
        name: _build(Architecture(), entry) for name, entry in cfg.get("architectures", {}).items()
    }
    blocks = {b: _build(cls(), cfg.get(b, {})) for b, cls in st.BLOCKS.items()}
    studies = {s: _build(cls(), cfg.get(s, {})) for s, cls in STUDY_SETTINGS.items()}
    return Config(architectures=dict(sorted(archs.items())), studies=studies,
                  results=cfg.get("results"), **blocks)  # fmt: skip


def results_root(cfg: Config, configfiles=()) -> str:
    """The run's results folder: the `results` key; without it, `results` for config.yaml
    alone and `results-NAME` for a run given `--configfile NAME.yaml` (names joined by '+'
    for several files), so that runs of different config files in one directory never
    overwrite each other's artifacts. `--config` overrides tweak their config in place."""
    if cfg.results is not None:
        return cfg.results.rstrip("/")
    names = [Path(f).stem for f in configfiles]
    return "results" if not names else "results-" + "+".join(names)


# -- checks the schema cannot express ------------------------------------------------------------


def _known(cfg: Config, name: str, key: str) -> None:
    if name not in cfg.architectures and name not in REGISTRY_NAMES:
        close = difflib.get_close_matches(name, [*cfg.architectures, *REGISTRY_NAMES], n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(
            f"config key {key!r}: unknown architecture {name!r}{hint}; define it under "
            f"'architectures' or use a registry model: {', '.join(sorted(REGISTRY_NAMES))}"
        )


def _check_sources(cfg: Config, used: set[str]) -> None:
    """nads_from points to a source directly, and no setting is given that would be ignored."""
    for name in sorted(used):
        a = cfg.arch(name)
        if a.nads_from is None:
            continue
        key = f"architectures.{name}"
        _known(cfg, a.nads_from, f"{key}.nads_from")
        if cfg.arch(a.nads_from).nads_from is not None:
            raise ConfigError(
                f"config key '{key}.nads_from': {a.nads_from!r} takes its NADs from another "
                "architecture itself; point to the source directly"
            )
        for field_name, given in (("nads", a.nads), ("nads_file", a.nads_file)):
            if given:
                raise ConfigError(
                    f"config key '{key}.{field_name}': {name} takes its NADs from "
                    f"{a.nads_from!r} (nads_from), so this setting would be ignored; set it on "
                    f"{a.nads_from!r}, or remove nads_from"
                )
        if a.shape != cfg.arch(a.nads_from).shape and name in cfg.architectures:
            raise ConfigError(
                f"config key '{key}.shape': {name} takes its NADs from {a.nads_from!r}, whose "
                f"shape is {cfg.arch(a.nads_from).shape}; the NADs fix the input shape"
            )
    for name in sorted(used):
        a = cfg.arch(name)
        if a.nads_file and a.nads:
            raise ConfigError(
                f"config key 'architectures.{name}.nads': {name} reads its NADs from "
                f"{a.nads_file!r} (nads_file), so these settings would be ignored"
            )


def nad_count(cfg: Config, name: str) -> int:
    """How many NADs the architecture `name` has: top_k, the file's rows, or d."""
    src = cfg.nad_source(name)
    a = cfg.arch(src)
    if a.nads_file:
        from .bases import BasisError, read_nad_file

        try:
            return read_nad_file(a.nads_file, a.shape, f"architectures.{src}.nads_file").shape[0]
        except BasisError as e:
            raise ConfigError(str(e)) from e
    k = cfg.nad_config(src).top_k
    return min(k, a.shape.d) if k else a.shape.d


def _check_indices(cfg: Config, study: str, s: StudySettings) -> None:
    indices = getattr(s, "indices", None)
    if indices is None or not REGISTRY[study].needs_nads:
        return
    extra = REGISTRY[study].index_extra
    for arch in s.architectures:
        count = nad_count(cfg, arch)  # reads a NAD file: once per architecture
        last = count - 1 - extra
        for pos, k in enumerate(indices):
            if k > last:
                src = cfg.nad_source(arch)
                raise ConfigError(
                    f"config key '{study}.indices.{pos}': {k} is greater than the maximum of "
                    f"{last} (the last NAD{' but one' if extra else ''} of {arch}: "
                    f"{count} NADs from {src}'s {cfg.nad_shape(arch)} inputs)"
                )


def _check_bands(cfg: Config) -> None:
    """Each band [first, last] of analysis.nad_bands within the NADs of every architecture of
    a study that evaluates it."""
    if not cfg.analysis.nad_bands.enabled:
        return
    archs = {
        a for s in cfg.enabled() if REGISTRY[s].needs_nads for a in cfg.studies[s].architectures
    }
    counts = {arch: nad_count(cfg, arch) for arch in sorted(archs)}  # reads NAD files once
    for pos, (first, last) in enumerate(cfg.analysis.nad_bands.bands):
        key = f"config key 'analysis.nad_bands.bands.{pos}'"
        if first > last:
            raise ConfigError(f"{key}: [{first}, {last}] is empty (write [first, last])")
        for arch, count in counts.items():
            if last >= count:
                raise ConfigError(
                    f"{key}: [{first}, {last}] ends past the last NAD of {arch} "
                    f"({count - 1}: {count} NADs from "
                    f"{cfg.nad_source(arch)}'s {cfg.nad_shape(arch)} inputs)"
                )


def _check_protocols(study: str, s: StudySettings) -> None:
    """A protocol sets only keys its study's data have (and `train`)."""
    entry = REGISTRY[study]
    keys = set(entry.data_keys)
    for arch in s.architectures:
        keys |= set(entry.data_settings(s, arch))
    for name, protocol in s.protocols.items():
        for key in protocol:
            if key != "train" and key not in keys:
                sets = ", ".join([*sorted(keys), "train"])
                raise ConfigError(
                    f"config key '{study}.protocols.{name}.{key}': the data of {study} have no "
                    f"{key!r}; a protocol of {study} sets: {sets}"
                )
    for arch, raw in getattr(s, "references", {}).items():
        key = f"{study}.references.{arch}"
        if arch not in s.architectures:
            raise ConfigError(
                f"config key {key!r}: {arch} is not in {study}.architectures "
                f"{list(s.architectures)}"
            )
        from . import references as refs

        try:  # read now: a file that cannot serve stops the run before any job
            ref = refs.read(refs.reference_of(raw), study, key, entry.reference_axis(s))
            cells = [tuple(v.columns()[k] for k in refs.keys(study)) for v in entry.variants(s)]
            refs.in_common(ref, cells, f"config key {key!r}: {raw['file']}")
        except refs.ReferenceError as e:
            raise ConfigError(str(e)) from e


def check_model(cfg: Config, name: str, spec: st.ModelSpec) -> None:
    """Raise ConfigError naming architectures.NAME.model (or .kwargs) when the model cannot
    run as nadpipe runs it on `spec`'s inputs."""
    from .models import KwargsError, ModelError
    from .models import check_model as run_check

    try:
        run_check(spec)
    except KwargsError as e:
        key = f"architectures.{name}.kwargs" + (f".{e.key}" if e.key else "")
        raise ConfigError(f"config key {key!r}: {e}") from e
    except ModelError as e:
        raise ConfigError(f"config key 'architectures.{name}.model': {e}") from e


def model_specs(cfg: Config) -> list[tuple[str, st.ModelSpec]]:
    """Every (architecture, model) the enabled studies and their NADs build, once each."""
    out = {}
    for study in cfg.enabled():
        s, entry = cfg.studies[study], REGISTRY[study]
        for name in s.architectures:
            a = cfg.arch(name)
            spec = st.ModelSpec(
                a.model, a.kwargs, entry.input_shape(cfg.nad_shape(name)), entry.classes
            )
            out[repr((name, spec))] = (name, spec)
            src = cfg.nad_source(name)
            if entry.needs_nads and not cfg.arch(src).nads_file:
                b = cfg.arch(src)
                out[repr((src, b))] = (src, st.ModelSpec(b.model, b.kwargs, b.shape, 1))
    return list(out.values())


def check(cfg: Config, raw: dict | None = None) -> list[str]:
    """Checks the schema cannot express (raise ConfigError naming the key); returns warnings
    about settings that are given but have no effect."""
    if cfg.results is not None:
        parts = Path(cfg.results).parts
        if Path(cfg.results).is_absolute() or ".." in parts or not parts:
            raise ConfigError(
                f"config key 'results': {cfg.results!r} is not a folder inside the working "
                "directory (a relative path without '..', e.g. results-mine): results stay "
                "in the run's directory"
            )
        if parts[0] in (".snakemake", ".nadpipe", "logs"):
            raise ConfigError(
                f"config key 'results': {cfg.results!r} is inside {parts[0]}/, which "
                "Snakemake or nadpipe keep for themselves"
            )
    warnings = []
    used: set[str] = set()
    for study in cfg.enabled():
        s = cfg.studies[study]
        for pos, name in enumerate(s.architectures):
            _known(cfg, name, f"{study}.architectures.{pos}")
            used.add(name)
        for field_name in ("train_per_arch", "sigma_per_arch"):
            for name in getattr(s, field_name, {}):
                _known(cfg, name, f"{study}.{field_name}.{name}")
                if name not in s.architectures:
                    warnings.append(
                        f"config key '{study}.{field_name}.{name}' has no effect: {name} is not "
                        f"in {study}.architectures {list(s.architectures)}"
                    )
    _check_sources(cfg, used)
    for name in sorted(used):
        src = cfg.nad_source(name)
        shape = cfg.nad_shape(name)
        for study in cfg.enabled():
            if name in cfg.studies[study].architectures:
                why = REGISTRY[study].check_shape(shape)
                if why:
                    raise ConfigError(f"config key 'architectures.{src}.shape': {study}: {why}")
        if not cfg.arch(src).nads_file:
            nad_settings = cfg.nad_config(src).compute()
            why = st.nad_problem(nad_settings, shape, st.config_words(src), f"{src}'s")
            if why:
                raise ConfigError(why)
    for name, spec in model_specs(cfg):
        # registry models with their defaults take any channel count on 32x32 inputs
        if spec.model not in REGISTRY_NAMES or spec.kwargs or spec.shape.size != (32, 32):
            check_model(cfg, name, spec)
    for study in cfg.enabled():
        _check_protocols(study, cfg.studies[study])
        _check_indices(cfg, study, cfg.studies[study])
        for arch in cfg.studies[study].architectures:
            why = REGISTRY[study].check_settings(cfg.studies[study], cfg.nad_shape(arch), arch)
            if why:
                raise ConfigError(why)
    _check_bands(cfg)
    if any(REGISTRY[s].needs_cifar for s in cfg.enabled()):
        from .cifar import missing_files, missing_message

        c = cfg.cifar10
        if not c.download and missing_files(c.root):
            raise ConfigError(missing_message(c.root))
    for study in cfg.enabled():  # analysis settings that must fit a study's grid
        why = REGISTRY[study].check_analysis(cfg.studies[study], cfg.analysis)
        if why:
            raise ConfigError(why)
    return (
        warnings
        + _ignored_nad_settings(cfg, used, (raw or {}).get("nads", {}))
        + rank_warnings(cfg)
    )


def _ignored_nad_settings(cfg: Config, used: set[str], raw_nads: dict) -> list[str]:
    out = []
    sources = {cfg.nad_source(a) for a in used if not cfg.arch(cfg.nad_source(a)).nads_file}
    for src in sorted(sources):
        nc = cfg.nad_config(src)
        if nc.estimator != "gradient":
            continue
        given = {**raw_nads, **cfg.arch(src).nads}
        for key in ("step", "windowed"):
            if key in given:
                out.append(
                    f"config key 'nads.{key}' has no effect on {src}: its estimator is "
                    "'gradient' (the key is the dipole's)"
                )
    return out


def rank_warnings(cfg: Config) -> list[str]:
    """Warnings for NAD indices at or past the rank of their covariance estimate: from n
    sensitivity samples the centred covariance has rank at most n - 1, and the NADs past it
    span its null space in arbitrary order."""
    by_source: dict[str, dict[str, set[int]]] = {}
    for study in cfg.enabled():
        s, entry = cfg.studies[study], REGISTRY[study]
        if not entry.needs_nads or not hasattr(s, "indices"):
            continue
        for arch in s.architectures:
            src = cfg.nad_source(arch)
            if cfg.arch(src).nads_file:
                continue
            used = by_source.setdefault(src, {}).setdefault(f"{study}.indices", set())
            used.update(n for v in entry.variants(s) for n in v.nad_indices())
    out = []
    for src, by_key in sorted(by_source.items()):
        nc = cfg.nad_config(src)
        rank = min(nc.n_networks * nc.n_points - 1, cfg.arch(src).shape.d)
        for key, indices in sorted(by_key.items()):
            past = sorted(i for i in indices if i >= rank)
            if past:
                out.append(
                    f"NAD indices {past} of {key} are at or past the rank ({rank}) of {src}'s "
                    f"NAD covariance estimate from {nc.n_networks} networks x {nc.n_points} "
                    f"point(s): those NADs span its null space in arbitrary order. Raise "
                    f"nads.n_networks above {max(past) + 1} for them to be ordered."
                )
    return out


def _typed(value):
    """A `--config` value as its YAML says: Snakemake reads a nested value (`nads={n_networks:
    50}`) with YAML's base loader, which leaves every scalar a string ('50')."""
    import yaml

    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_typed(v) for v in value]
    if isinstance(value, str):
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError:
            return value
        if parsed is None or isinstance(parsed, bool | int | float):
            return parsed
    return value


def with_overrides(config: dict, overrides) -> dict:
    """`config` with the command line's `--config` values (`overrides`) typed as YAML types
    them in a file and merged in key by key, as Snakemake merges them."""

    def merge(base, new):
        if isinstance(base, dict) and isinstance(new, dict):
            return {**base, **{k: merge(base.get(k), v) for k, v in new.items()}}
        return new

    return merge(dict(config), {k: _typed(v) for k, v in dict(overrides or {}).items()})


def load_config(config: dict, schema_path: str | Path, overrides=None) -> tuple[Config, list[str]]:
    """Validate `config` (with the command line's `--config` `overrides` typed as in a file),
    fill the defaults, run the checks: (Config, warnings)."""
    raw = validate(with_overrides(config, overrides) if overrides else config, schema_path)
    cfg = build(raw)
    return cfg, check(cfg, raw)


# -- the table of keys in the README, from the schema (meaning) and the settings (default) ------


def _resolve(schema: dict, node: dict) -> dict:
    """A schema node with its $ref and allOf parts merged in (their properties together)."""
    out = dict(node)
    props = dict(node.get("properties", {}))
    parts = [node["$ref"]] if "$ref" in node else []
    parts += [p["$ref"] for p in node.get("allOf", []) if "$ref" in p]
    for ref in parts:
        target = _resolve(schema, schema["$defs"][ref.split("/")[-1]])
        props = {**target.get("properties", {}), **props}
        out.setdefault("description", target.get("description"))
    out["properties"] = props
    return out


def _describe(schema: dict, node: dict) -> str:
    node = _resolve(schema, node)
    text = " ".join(str(node.get("description", "")).split())
    if "enum" in node:
        text += f" One of: {', '.join(map(str, node['enum']))}."
    return text.replace("|", "\\|")


def _fmt(value: Any) -> str:
    text = yaml.safe_dump(st.plain(value), default_flow_style=True, width=1000)
    return f"`{text.strip().removesuffix('...').strip()}`"


def _rows(schema: dict, node: dict, default: Any, prefix: str) -> list[tuple[str, str, str]]:
    node = _resolve(schema, node)
    out = []
    for name, sub in node["properties"].items():
        value = getattr(default, name)
        if is_dataclass(value):
            out += _rows(schema, sub, value, f"{prefix}{name}.")
        else:
            out.append((f"{prefix}{name}", _fmt(value), _describe(schema, sub)))
    return out


def reference_table(schema_path: str | Path) -> str:
    """Markdown table of every config key: its default (nadpipe.settings) and meaning (the
    schema). The README holds it; a test keeps the two in agreement."""
    schema = yaml.safe_load(Path(schema_path).read_text())
    props = schema["properties"]
    rows = [("results", "`results`, or `results-NAME` with `--configfile NAME.yaml`",
             _describe(schema, props["results"]))]  # fmt: skip
    arch = props["architectures"]["additionalProperties"]
    for name, sub in arch["properties"].items():
        default = "the entry's name" if name == "model" else _fmt(getattr(Architecture(), name))
        rows.append((f"architectures.NAME.{name}", default, _describe(schema, sub)))
    for block, cls in st.BLOCKS.items():
        rows += _rows(schema, props[block], cls(), f"{block}.")
    common = {f.name for f in fields(StudySettings)}
    study_schema = _resolve(schema, schema["$defs"]["study"])["properties"]
    for name in [f.name for f in fields(StudySettings)]:
        if name == "train":
            continue
        per = "; ".join(f"{s}: {_fmt(getattr(c(), name))}" for s, c in STUDY_SETTINGS.items())
        rows.append((f"STUDY.{name}", per, _describe(schema, study_schema[name])))
    train = _resolve(schema, schema["$defs"]["train_settings"])["properties"]
    for name in train:
        values = {s: getattr(c().train, name) for s, c in STUDY_SETTINGS.items()}
        base = getattr(st.TrainSettings(), name)
        others = "; ".join(f"{s}: {_fmt(v)}" for s, v in values.items() if v != base)
        default = _fmt(base) + (f" ({others})" if others else "")
        rows.append((f"STUDY.train.{name}", default, _describe(schema, train[name])))
    for study, cls in STUDY_SETTINGS.items():
        node = _resolve(schema, props[study])
        for name, sub in node["properties"].items():
            if name not in common:
                rows.append((f"{study}.{name}", _fmt(getattr(cls(), name)), _describe(schema, sub)))
    lines = ["| key | default | meaning |", "| --- | --- | --- |"]
    lines += [f"| `{k}` | {d} | {m} |" for k, d, m in rows]
    return "\n".join(lines) + "\n"
