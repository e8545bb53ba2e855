"""The grid: every job of the DAG as a typed value built from the config.

    nads -> train (study x arch x variant x seed) -> evaluate -> aggregate -> plot

Rules pass these values whole as params (Snakemake compares their repr and reruns a job when
they change), so each job's spec holds exactly what its outputs depend on: changing evaluation
or analysis settings never retrains, adding a seed or a NAD index plans only the new cells.
Loading the plan needs no torch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from itertools import product

from . import batching, shards
from .cifar_files import cifar_files
from .config import Config
from .config.checks import nad_indices_used
from .io import file_sha256
from .paths import (
    AHEAD,
    CHECKPOINTS,
    CONFIG,
    CONFIG_PAGE,
    EVAL,
    FIGURE,
    LANDING,
    MODEL,
    NAD,
    NAD_FIGURE,
    NAD_SHARD,
    RUNS,
    SIGNATURE_FIGURE,
    SIGNATURES,
    SUMMARY,
    SUMMARY_TABLE,
)
from .provenance import source_digest
from .settings import AnalysisSettings, CifarData, ModelSpec, NadBands, NadSettings, TrainSettings
from .settings import plain as settings_plain
from .studies import (
    NAD_BANDS,
    REGISTRY,
    DataSpec,
    Figure,
    split_protocol,
    study_code,
    with_protocol,
)


@dataclass(frozen=True)
class Cell:
    """One trained model: (study, arch, variant path, seed)."""

    study: str
    arch: str
    variant: str
    seed: int

    def path(self, template: str, root: str) -> str:
        return template.format(
            root=root, study=self.study, arch=self.arch, variant=self.variant, seed=self.seed
        )


@dataclass(frozen=True)
class NadJob:
    """What an architecture's NADs are: computed from its model, or read from a file."""

    arch: str
    model: ModelSpec  # the single-logit network on the NAD shape
    settings: NadSettings
    file: str | None = None  # architectures.NAME.nads_file
    file_sha256: str | None = None  # its content: replacing the file reruns what rests on it


@dataclass(frozen=True)
class NadShardJob:
    """The sensitivities of networks first .. stop - 1 of an architecture's NADs
    (nadpipe.shards): its NadJob's networks but their number, which only says how many shards
    there are (so raising it reruns no shard)."""

    nads: NadJob  # settings.n_networks: 0
    first: int
    stop: int


@dataclass(frozen=True)
class TrainJob:
    """The training of one cell's seeds (several: one batched seed ensemble)."""

    study: str
    arch: str
    variant: str
    seeds: tuple[int, ...]
    model: ModelSpec
    train: TrainSettings
    data: tuple[DataSpec, ...]  # one per seed
    nads: NadJob | None
    stream: tuple  # the model's random-stream key besides "init"/"order" and the seed


@dataclass(frozen=True)
class EvalJob:
    """The evaluation of one trained model: its study's conditions and measures."""

    study: str
    arch: str
    variant: str
    seed: int
    model: ModelSpec
    data: DataSpec
    nads: NadJob | None
    batch_size: int
    conditions: tuple[tuple[str, tuple[int, ...]], ...]
    measures: tuple[str, ...]
    analysis: AnalysisSettings | None  # only the settings the measures read
    stream: tuple


class Plan:
    """The jobs of a validated config."""

    def __init__(self, cfg: Config, root: str = "results"):
        self.cfg = cfg
        self.root = root  # the results folder (nadpipe.config.results_root)
        self._digests: dict[str, str] = {}  # NAD file -> sha256, read once per run
        self._codes: dict[str, str] = {}  # study -> its module's code digest (study_code)

    def at(self, template: str, **keys) -> str:
        """A path template (NAD, SUMMARY, ...) filled in, under this plan's results folder."""
        return template.format(root=self.root, **keys)

    # -- cells ----------------------------------------------------------------------------

    def cells(self, study: str) -> list[Cell]:
        """Every (protocol, arch, variant, seed) of an enabled study, in a fixed order; under a
        named protocol the variant's path ends in @PROTOCOL."""
        s = self.cfg.studies[study]
        if not s.enabled:
            return []
        variants = [v.path for v in REGISTRY[study].variants(s)]
        grid = product(s.protocols or [""], s.architectures, variants, s.seeds)
        return [Cell(study, a, with_protocol(v, p), seed) for p, a, v, seed in grid]

    def nad_architectures(self) -> list[str]:
        """Architectures whose NADs some enabled study needs (the sources)."""
        out = set()
        for study in self.cfg.enabled():
            if REGISTRY[study].needs_nads:
                out.update(self.cfg.nad_source(a) for a in self.cfg.studies[study].architectures)
        return sorted(out)

    def seed_ensembles(self) -> list[str]:
        """Enabled studies whose seeds train together (group_seeds)."""
        return [s for s in self.cfg.enabled() if self.cfg.studies[s].group_seeds]

    def section_cells(self, study: str, arch: str) -> list[Cell]:
        """The cells of `arch` in `study`'s figures drawn from the models' arrays: the first
        seed, and the variants the study keeps for them (Study.array_variants; every one when
        None)."""
        seeds = self.cfg.studies[study].seeds
        keep = REGISTRY[study].array_variants(self.cfg.analysis)
        return [
            c
            for c in self.cells(study)
            if c.arch == arch and c.seed == seeds[0] and (keep is None or c.variant in keep)
        ]

    # -- jobs -----------------------------------------------------------------------------

    def _digest(self, path: str) -> str:
        if path not in self._digests:  # read once per run
            self._digests[path] = file_sha256(path)
        return self._digests[path]

    def nad_job(self, arch: str) -> NadJob:
        """`arch`'s NADs; until converged, their settings' n_networks is 0: the rounds decide
        it (nad_goal), and the jobs that read the NADs rerun only when the NADs change."""
        a = self.cfg.arch(arch)
        model = ModelSpec(a.model, a.kwargs, a.shape, 1, source_digest(a.model))
        digest = self._digest(a.nads_file) if a.nads_file else None
        nc = self.cfg.nad_config(arch)
        settings = nc.compute()
        if nc.until_converged and nc.networks_per_shard and not a.nads_file:
            settings = replace(settings, n_networks=0)
        return NadJob(arch, model, settings, a.nads_file, digest)

    def job(self, rule: str, wildcards: dict) -> NadJob | NadShardJob | TrainJob | EvalJob | None:
        """The typed job of a job of `rule` with these wildcards, which its params pass whole
        (`job`); None for a rule that has none (a figure, a table, a NAD round)."""
        w = wildcards
        if rule == "nads":
            return self.nad_job(w["arch"])
        if rule == "nad_shard":
            return self.nad_shard_job(w["arch"], int(w["first"]), int(w["stop"]))
        if rule == "evaluate":
            return self.eval_job(w["study"], w["arch"], w["variant"], int(w["seed"]))
        seeds = {"train": None, **{self.seed_rule(s): s for s in self.seed_ensembles()}}
        if rule not in seeds:
            return None
        study = seeds[rule] or w["study"]
        together = tuple(self.cfg.studies[study].seeds) if seeds[rule] else (int(w["seed"]),)
        return self.train_job(study, w["arch"], w["variant"], together)

    @staticmethod
    def seed_rule(study: str) -> str:
        """The rule that trains all seeds of a cell of `study` in one job (group_seeds)."""
        return f"train_{study}_seeds"

    def nad_shard_job(self, arch: str, first: int, stop: int) -> NadShardJob:
        job = self.nad_job(arch)
        return NadShardJob(replace(job, settings=replace(job.settings, n_networks=0)), first, stop)

    def nad_shards(self, arch: str, networks: int | None = None) -> list[str]:
        """The shards (their .pt) of `arch`'s NADs of its first `networks` networks (default:
        n_networks); none when its NADs are computed in one job or read from a file."""
        nc, a = self.cfg.nad_config(arch), self.cfg.arch(arch)
        if nc.networks_per_shard is None or a.nads_file:
            return []
        n = nc.n_networks if networks is None else networks
        return [
            self.at(NAD_SHARD, arch=arch, first=first, stop=stop) + ".pt"
            for first, stop in shards.ranges(n, nc.networks_per_shard)
        ]

    def nad_rounds(self, arch: str) -> list[int]:
        """The networks after each round of `arch`'s NADs until converged (nadpipe.shards);
        none unless until_converged. The first round has a rank above every NAD index the
        studies use."""
        nc, a = self.cfg.nad_config(arch), self.cfg.arch(arch)
        if not nc.until_converged or nc.networks_per_shard is None or a.nads_file:
            return []

        used = [i for key in nad_indices_used(self.cfg).get(arch, {}).values() for i in key]
        floor = max(shards.MIN_NETWORKS, -(-(max(used, default=0) + 2) // nc.n_points))
        return shards.rounds(nc.networks_per_shard, nc.n_networks, floor)

    def nad_goal(self, arch: str) -> dict:
        """What `arch`'s rounds until converged ask: their networks (but the number), the
        shard size, the threshold and the ceiling. (Nothing read from disk: a goal that
        depended on the rounds would change after the run that computes them.)"""
        nc = self.cfg.nad_config(arch)
        return {
            "shards_of": settings_plain(self.nad_shard_job(arch, 0, 0).nads),
            "ceiling": nc.n_networks,
            "networks_per_shard": nc.networks_per_shard,
            "min_overlap_top10": nc.min_overlap_top10,
        }

    def model_spec(self, study: str, arch: str) -> ModelSpec:
        a = self.cfg.arch(arch)
        entry = REGISTRY[study]
        shape = entry.input_shape(self.cfg.nad_shape(arch))
        return ModelSpec(a.model, a.kwargs, shape, entry.classes, source_digest(a.model))

    def data_spec(self, study: str, arch: str, variant: str, seed: int) -> DataSpec:
        """What a cell's data depend on: its protocol's data settings; the variant without the
        protocol, so that every protocol draws the same data (for the same settings)."""
        entry, s = REGISTRY[study], self.cfg.studies[study]
        inner, protocol = split_protocol(variant)
        cifar = CifarData.of(self.cfg.cifar10) if entry.needs_cifar else None
        settings = tuple(entry.data_settings(s.with_protocol(protocol), arch).items())
        if study not in self._codes:  # read once per plan: a large grid has many cells
            self._codes[study] = study_code(study)
        return DataSpec(
            study, inner, seed, self.cfg.nad_shape(arch), settings, cifar, self._codes[study]
        )

    def stream(self, study: str, arch: str, variant: str) -> tuple:
        """A cell's random-stream key: the same initialisation and batch order under every
        protocol."""
        entry = REGISTRY[study]
        return (arch, *entry.stream(entry.variant.parse(split_protocol(variant)[0])))

    def train_job(self, study: str, arch: str, variant: str, seeds: tuple[int, ...]) -> TrainJob:
        entry = REGISTRY[study]
        nads = self.nad_job(self.cfg.nad_source(arch)) if entry.needs_nads else None
        return TrainJob(
            study,
            arch,
            variant,
            tuple(seeds),
            self.model_spec(study, arch),
            self.cfg.studies[study].train_for(arch, split_protocol(variant)[1]),
            tuple(self.data_spec(study, arch, variant, s) for s in seeds),
            nads,
            self.stream(study, arch, variant),
        )

    def train_cells(self) -> list[tuple[TrainJob, str, str]]:
        """Every one-seed training of the enabled studies (those that train their seeds
        together excepted), with its weights and record paths: what nadpipe.batching
        batches."""
        out = []
        for study in self.cfg.enabled():
            if study in self.seed_ensembles():
                continue
            for c in self.cells(study):
                path = c.path(MODEL, self.root)
                job = self.train_job(study, c.arch, c.variant, (c.seed,))
                out.append((job, path + ".pt", path + ".json"))
        return out

    def batch_cells(self) -> list[batching.Cell]:
        """`train_cells` with each cell's ahead file and the files its training reads."""
        out = []
        for job, model, record in self.train_cells():
            ahead = Cell(job.study, job.arch, job.variant, job.seeds[0]).path(AHEAD, self.root)
            nads, cifar = self.nad_files(job.study, job.arch), self.cifar_files(job.study)
            out.append(batching.Cell(job, model, record, ahead, tuple(nads), tuple(cifar)))
        return out

    def batches(self, accelerated: bool, forced=frozenset) -> list[batching.Batch]:
        """The cells this run trains together (nadpipe.batching), as many at a time as
        `gpus.batch_cells` says for jobs that find an accelerator or not (`accelerated`);
        `forced()`: the rules Snakemake reruns whatever their outputs (--forcerun; "all" for
        -F)."""
        size = self.cfg.gpus.backend().batch_size(accelerated)
        if size <= 1:
            return []

        forced = forced()

        def is_forced(cell: batching.Cell) -> bool:
            reads = {"train"} | ({"nads"} if cell.nads else set())
            reads |= {"cifar10_download"} if cell.cifar else set()
            return "all" in forced or bool(reads & forced)

        checkpoints = self.at(CHECKPOINTS)
        return batching.plan(self.batch_cells(), size, batching.stackable, is_forced, checkpoints)

    def measures(self, study: str) -> tuple[str, ...]:
        entry = REGISTRY[study]
        bands = self.cfg.analysis.nad_bands.enabled and entry.needs_nads
        return entry.measures + (("nad_bands",) if bands else ())

    def figures(self, study: str) -> dict[str, Figure]:
        """The study's figures, and the NAD-band figure where its models are evaluated so."""
        found = dict(REGISTRY[study].figures)
        if "nad_bands" in self.measures(study):
            found["nad_bands"] = NAD_BANDS
        return found

    def eval_job(self, study: str, arch: str, variant: str, seed: int) -> EvalJob:
        entry = REGISTRY[study]
        measures = self.measures(study)
        analysis = None
        if measures:
            analysis = self.cfg.analysis
            if "nad_bands" not in measures:
                analysis = replace(analysis, nad_bands=NadBands())
        nads = self.nad_job(self.cfg.nad_source(arch)) if entry.needs_nads else None
        conditions = entry.conditions(self.cfg.nad_shape(arch))
        return EvalJob(
            study,
            arch,
            variant,
            seed,
            self.model_spec(study, arch),
            self.data_spec(study, arch, variant, seed),
            nads,
            self.cfg.studies[study].eval_batch_size,
            tuple(conditions.items()),
            measures,
            analysis,
            self.stream(study, arch, variant),
        )

    # -- files ----------------------------------------------------------------------------

    def nad_files(self, study: str, arch: str) -> list[str]:
        """The NAD artifact a study's job of `arch` reads (none for a study without NADs)."""
        if not REGISTRY[study].needs_nads:
            return []
        return [self.at(NAD, arch=self.cfg.nad_source(arch)) + ".pt"]

    def references(self, study: str) -> dict:
        """Architecture -> its published table (nadpipe.references) with the file's sha256, so
        that a replaced file reruns the comparison."""
        refs = getattr(self.cfg.studies[study], "references", {}) or {}
        return {arch: {**ref, "sha256": self._digest(ref["file"])} for arch, ref in refs.items()}

    def reference_files(self, study: str) -> list[str]:
        return [r["file"] for r in self.references(study).values()]

    def reference_axis(self, study: str) -> list[int] | None:
        """The values along each axis of a headerless reference map (the Fourier study's
        frequencies), or None."""
        return REGISTRY[study].reference_axis(self.cfg.studies[study])

    def cifar_files(self, study: str | None = None) -> list[str]:
        """The CIFAR-10 files `study` reads (none for a study without CIFAR); without a study,
        the files a download writes."""
        if study is not None and not REGISTRY[study].needs_cifar:
            return []

        return cifar_files(self.cfg.cifar10.root)

    def evaluations(self, study: str) -> list[str]:
        return [c.path(EVAL, self.root) + ".parquet" for c in self.cells(study)]

    def figure_inputs(self, study: str, figure: str, arch: str) -> list[str]:
        if self.figures(study)[figure].source == "arrays":
            return [c.path(EVAL, self.root) + ".npz" for c in self.section_cells(study, arch)]
        return [self.at(SUMMARY, study=study)]

    def headline_figures(self) -> list[str]:
        """The figures on the report's first page: the first enabled study's headline figure
        (Study.headline), one per architecture."""
        for study in self.cfg.enabled():
            figures = self.figures(study)
            if figures:
                name = REGISTRY[study].headline or next(iter(figures))
                archs = self.cfg.studies[study].architectures
                return [self.at(FIGURE, study=study, figure=name, arch=a) for a in archs]
        return []

    def final_outputs(self) -> list[str]:
        """Every table and figure of the enabled studies, the NAD files and figures, the
        config and the report's pages."""
        out = []
        for study in self.cfg.enabled():
            out += [
                self.at(SUMMARY, study=study),
                self.at(RUNS, study=study),
            ]
            out += [
                self.at(FIGURE, study=study, figure=f, arch=a)
                for f in self.figures(study)
                for a in self.cfg.studies[study].architectures
            ]
            out.append(self.at(SUMMARY_TABLE, study=study))
        if not out:
            return []
        archs = self.nad_architectures()
        out += [self.at(NAD_FIGURE, arch=a) for a in archs]
        out += [self.at(NAD, arch=a) + ".npy" for a in archs]
        if len(archs) >= 1:
            out += [self.at(SIGNATURES), self.at(SIGNATURE_FIGURE)]
        return out + [self.at(CONFIG), self.at(CONFIG_PAGE), self.at(LANDING)]

    def findings(self, outputs: list[str]) -> list[str]:
        """What the studies found, from the summaries among `outputs` (Study.findings): the
        lines the end of a run and the report's first page state."""

        # deferred: it loads pandas, which importing grid does not
        import pandas as pd

        out = []
        for path in outputs:
            if not path.endswith("/summary.parquet") or not os.path.isfile(path):
                continue
            df = pd.read_parquet(path)
            study = str(df["study"].iloc[0])
            out += [f"{study}: {line}" for line in REGISTRY[study].findings(df)]
        return out
