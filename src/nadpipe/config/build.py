"""The typed `Config`: the validated data put into nadpipe.settings' dataclasses (every default
filled in, lists as tuples), `--config` overrides typed as in a file, the results folder."""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, is_dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from .. import settings as st
from ..settings import Architecture, NadConfig, Shape, StudySettings
from .schema import STUDY_SETTINGS, ConfigError


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
    study_modules: tuple[str, ...] = ()  # modules that register studies of one's own
    keep_models: bool = True  # False: trained weights are temporary (removed once evaluated)

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
        if self.study_modules:
            out["study_modules"] = list(self.study_modules)
        if not self.keep_models:
            out["keep_models"] = False
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
    return Config(
        architectures=dict(sorted(archs.items())),
        studies=studies,
        results=cfg.get("results"),
        study_modules=tuple(cfg.get("study_modules", ())),
        keep_models=cfg.get("keep_models", True),
        **blocks,
    )


def results_root(cfg: Config, configfiles=()) -> str:
    """The run's results folder: the `results` key; without it, `results` for config.yaml
    alone and `results-NAME` for a run given `--configfile NAME.yaml` (names joined by '+'
    for several files), so that runs of different config files in one directory never
    overwrite each other's artifacts. `--config` overrides tweak their config in place."""
    if cfg.results is not None:
        return cfg.results.rstrip("/")
    names = [Path(f).stem for f in configfiles]
    root = "results" if not names else "results-" + "+".join(names)
    # braces are Snakemake's wildcards, and a control character no command line carries:
    # other characters (spaces, accents, commas, '=') are paths like any other
    if re.search(r"[{}\x00-\x1f\x7f]", root):
        raise ConfigError(
            f"the config file name {' + '.join(map(str, configfiles))} gives the results folder "
            f"{root!r}, whose name holds a brace or a control character, which Snakemake's "
            f"paths cannot hold: rename the file, or give the config its folder (the key "
            f"`results`, e.g. --config results=results-mine)"
        )
    return root


def _typed(value):
    """A `--config` value as its YAML says: Snakemake reads a nested value (`nads={n_networks:
    50}`) with YAML's base loader, which leaves every scalar a string ('50')."""

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
