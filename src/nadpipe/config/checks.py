"""The checks a schema cannot express, next to nothing else: each raises ConfigError naming the
key (architectures, NAD indices and bands, protocols and references, models, input shapes), and
the warnings about settings that change nothing."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

from .. import settings as st
from .. import verdicts
from ..cifar_files import missing_files, missing_message
from ..estimators import ESTIMATORS
from ..settings import REGISTRY_NAMES, StudySettings
from ..studies import REGISTRY
from .build import Config
from .schema import ConfigError
from .words import config_words, nad_problem, shard_problem


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
        # deferred: it loads numpy, which importing checks does not
        from ..bases import BasisError, read_nad_file

        try:
            return read_nad_file(a.nads_file, a.shape, f"architectures.{src}.nads_file").shape[0]
        except BasisError as e:
            raise ConfigError(str(e)) from e
    k = cfg.nad_config(src).top_k
    return min(k, a.shape.d) if k else a.shape.d


def _nads_of(cfg: Config, arch: str, count: int) -> str:
    """Where `arch`'s `count` NADs come from, in words: a file's rows or its inputs."""
    src = cfg.nad_source(arch)
    file = cfg.arch(src).nads_file
    if file:
        return f"{count} NADs, the rows of {file}"
    return f"{count} NADs from {src}'s {cfg.nad_shape(arch)} inputs"


def _check_precision(study: str, s: StudySettings) -> None:
    """`precision: fp32` beside the older `bf16: true`: one asks float32, the other bf16."""
    for arch in s.architectures:
        train = s.train_for(arch)
        if train.bf16 and train.precision == "fp32":
            raise ConfigError(
                f"config key '{study}.train.precision': fp32 for {arch}, while bf16 is true "
                "there (the older switch for bf16 on an accelerator): they disagree; drop bf16 "
                "and give precision alone"
            )


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
                raise ConfigError(
                    f"config key '{study}.indices.{pos}': {k} is greater than the maximum of "
                    f"{last} (the last NAD{' but one' if extra else ''} of {arch}: "
                    f"{_nads_of(cfg, arch, count)})"
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
        # deferred: it loads pandas, which importing checks does not
        from .. import references as refs

        try:  # read now: a file that cannot serve stops the run before any job
            ref = refs.read(refs.reference_of(raw), study, key, entry.reference_axis(s))
            cells = [tuple(v.columns()[k] for k in refs.keys(study)) for v in entry.variants(s)]
            refs.in_common(ref, cells, f"config key {key!r}: {raw['file']}")
        except refs.ReferenceError as e:
            raise ConfigError(str(e)) from e


def check_model(cfg: Config, name: str, spec: st.ModelSpec) -> None:
    """Raise ConfigError naming architectures.NAME.model (or .kwargs) when the model cannot
    run as nadpipe runs it on `spec`'s inputs (a registry model that passed before is not built
    again: nadpipe.verdicts)."""

    if verdicts.known(spec):
        return
    # deferred: it loads torch, which importing checks does not
    from ..models import KwargsError, ModelError
    from ..models import check_model as run_check

    try:
        run_check(spec)
        verdicts.passed(spec)
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


OWN_FOLDERS = (".git", ".snakemake", ".nadpipe", ".venv")  # what results must not write into


def _check_results(results: str | None) -> None:
    """The `results` key names a visible folder inside the working directory."""
    if results is None:
        return
    parts = Path(results).parts
    if Path(results).is_absolute() or ".." in parts or not parts:
        raise ConfigError(
            f"config key 'results': {results!r} is not a folder inside the working "
            "directory (a relative path without '..', e.g. results-mine): results stay "
            "in the run's directory"
        )
    owned = [p for p in parts if p in OWN_FOLDERS]
    if owned:
        where = "is" if parts[-1] == owned[0] and len(parts) == 1 else "is inside"
        raise ConfigError(
            f"config key 'results': {results!r} {where} {owned[0]}/, a folder of "
            "git's, Snakemake's, nadpipe's or Python's own (.git, .snakemake, .nadpipe, "
            ".venv): name another folder, e.g. results-mine"
        )
    if Path(results).exists() and not Path(results).is_dir():
        raise ConfigError(
            f"config key 'results': {results!r} is a file, not a folder: name a "
            "folder for the results, e.g. results-mine"
        )


def _check_lock_dir(lock_dir: str) -> None:
    """gpus.lock_dir can be made and written (the GPU jobs take their slots there)."""
    at = os.path.abspath(lock_dir)
    while not os.path.exists(at):
        at = os.path.dirname(at)
    if not os.path.isdir(at) or not os.access(at, os.W_OK | os.X_OK):
        raise ConfigError(
            f"config key 'gpus.lock_dir': {lock_dir!r} cannot be made or written here "
            f"({at} is {'not a folder' if not os.path.isdir(at) else 'not writable'}); name a "
            "folder this user can write, e.g. .nadpipe/gpu_slots (the default)"
        )


def _analysis_warnings(cfg: Config, raw: dict) -> list[str]:
    """analysis.n_points, given, above a study's test points: the analysis uses those there
    are (the default, 200, says nothing: it means "up to 200")."""
    out = []
    if "n_points" not in (raw.get("analysis") or {}):
        return out
    for study in cfg.enabled():
        n_test = getattr(cfg.studies[study], "n_test", None)
        if n_test is not None and cfg.analysis.n_points > n_test:
            out.append(
                f"config key 'analysis.n_points' ({cfg.analysis.n_points}) is more than "
                f"{study}.n_test ({n_test}): {study}'s analysis uses its {n_test} test points"
            )
    return out


def check(cfg: Config, raw: dict | None = None) -> list[str]:
    """Checks the schema cannot express (raise ConfigError naming the key); returns warnings
    about settings that are given but have no effect."""
    _check_results(cfg.results)
    _check_lock_dir(cfg.gpus.lock_dir)
    warnings = _analysis_warnings(cfg, raw or {})
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
        _check_nads_of(cfg, name)
    for name, spec in model_specs(cfg):
        # registry models with their defaults take any channel count on 32x32 inputs
        if spec.model not in REGISTRY_NAMES or spec.kwargs or spec.shape.size != (32, 32):
            check_model(cfg, name, spec)
    for study in cfg.enabled():
        _check_protocols(study, cfg.studies[study])
        _check_precision(study, cfg.studies[study])
        _check_indices(cfg, study, cfg.studies[study])
        for arch in cfg.studies[study].architectures:
            why = REGISTRY[study].check_settings(cfg.studies[study], cfg.nad_shape(arch), arch)
            if why:
                raise ConfigError(why)
    _check_bands(cfg)
    if any(REGISTRY[s].needs_cifar for s in cfg.enabled()):
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


def _check_nads_of(cfg: Config, name: str) -> None:
    """An architecture's input shape suits its studies, and its NAD settings can be computed."""
    src = cfg.nad_source(name)
    shape = cfg.nad_shape(name)
    for study in cfg.enabled():
        if name in cfg.studies[study].architectures:
            why = REGISTRY[study].check_shape(shape)
            if why:
                raise ConfigError(f"config key 'architectures.{src}.shape': {study}: {why}")
    if not cfg.arch(src).nads_file:
        nc = cfg.nad_config(src)
        nad_settings = nc.compute()
        words = config_words(src)
        why = nad_problem(nad_settings, shape, words, f"{src}'s") or shard_problem(
            nad_settings, nc.networks_per_shard, nc.until_converged, words
        )
        if why:
            raise ConfigError(why)


def _ignored_nad_settings(cfg: Config, used: set[str], raw_nads: dict) -> list[str]:
    out = []
    sources = {cfg.nad_source(a) for a in used if not cfg.arch(cfg.nad_source(a)).nads_file}
    for src in sorted(sources):
        nc = cfg.nad_config(src)
        given = {**raw_nads, **cfg.arch(src).nads}
        for name, other in ESTIMATORS.items():
            for key in other.reads:
                if key in given and key not in ESTIMATORS[nc.estimator].reads:
                    out.append(
                        f"config key 'nads.{key}' has no effect on {src}: its estimator is "
                        f"'{nc.estimator}' (the key is the {name}'s)"
                    )
    return out


def nad_indices_used(cfg: Config) -> dict[str, dict[str, set[int]]]:
    """Per architecture whose NADs are computed, the NAD indices each study's `indices` key
    uses ({source: {"study.indices": {i, ...}}})."""
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
    return by_source


def rank_warnings(cfg: Config) -> list[str]:
    """Warnings for NAD indices at or past the rank of their covariance estimate: from n
    sensitivity samples the centred covariance has rank at most n - 1, and the NADs past it
    span its null space in arbitrary order."""
    out = []
    for src, by_key in sorted(nad_indices_used(cfg).items()):
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
