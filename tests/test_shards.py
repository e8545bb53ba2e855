"""NADs in shards (nadpipe.shards): the merged NADs equal the unsharded ones bit for bit (on the
CPU and on the stand-in accelerator); raising n_networks computes only the new shards, in a
dry run and in a real one; until converged, rounds stop at the first converged one, and a
raised ceiling reruns the rounds only where they had not converged; `nadpipe nads` shards
into a folder and merges."""

import copy
import json
import os
import re
from functools import partial
from pathlib import Path

import pytest
import torch
import yaml
from conftest import REPO, SCHEMA
from helpers import command, jobs_run, nadpipe_here, planned, snakemake
from standin import DEVICE, standin

from nadpipe import config as nc
from nadpipe import shards
from nadpipe.models import build
from nadpipe.nads import compute_nads, nads_of
from nadpipe.settings import ModelSpec, NadSettings, Shape

LENET = ModelSpec("lenet", {}, Shape(1, 32, 32), 1)


def _sharded(settings: NadSettings, size: int, device="cpu", spec: ModelSpec = LENET) -> dict:
    """The NADs of `settings`' networks from shards of `size`, computed last shard first."""
    parts = []
    for first, stop in reversed(shards.ranges(settings.n_networks, size)):
        parts.append(shards.compute(partial(build, spec), spec, settings, spec.shape, first,
                                    stop, device, progress=False))  # fmt: skip
    g = torch.cat([p["sensitivities"] for p in sorted(parts, key=lambda p: p["first"])])
    return nads_of(g, settings, spec.shape, progress=False)


def _same(a: dict, b: dict) -> None:
    assert torch.equal(a["vectors"], b["vectors"])
    assert torch.equal(a["eigenvalues"], b["eigenvalues"])
    for key in ("split_half", "isotropy"):  # NaN where a half's rank is too low: as text
        assert json.dumps(a[key], sort_keys=True) == json.dumps(b[key], sort_keys=True)


# the plain dipole at 16 x 16 (a quarter of the probes; sharding is blind to the input's size),
# the windowed one at 32 x 32, where both of LeNet's convolutions are windowed
@pytest.mark.parametrize(("windowed", "side"), [(True, 32), (False, 16)])
def test_sharded_nads_equal_the_unsharded_bit_for_bit(windowed, side):
    spec = ModelSpec("lenet", {}, Shape(1, side, side), 1)
    settings = NadSettings(n_networks=40, networks_per_chunk=8, windowed=windowed)
    whole = compute_nads(partial(build, spec), settings, spec.shape, progress=False)
    _same(_sharded(settings, 16, spec=spec), whole)  # shards 0-16, 16-32 and a partial 32-40


def test_sharded_nads_equal_the_unsharded_on_the_standin_accelerator():
    spec = ModelSpec("lenet", {}, Shape(1, 16, 16), 1)  # as above: the size is no matter here
    settings = NadSettings(n_networks=24, networks_per_chunk=8)
    with standin():
        whole = compute_nads(partial(build, spec), settings, spec.shape, DEVICE, progress=False)
        _same(_sharded(settings, 8, DEVICE, spec), whole)
    assert whole["device"] == "standin"


def test_shards_that_do_not_belong_together_are_refused(tmp_path):
    settings = NadSettings(n_networks=24, networks_per_chunk=8)
    paths = []
    for first, stop, seed in ((0, 8, 0), (8, 16, 1), (16, 24, 0)):
        shard = shards.compute(partial(build, LENET), LENET, NadSettings(
            n_networks=24, networks_per_chunk=8, seed=seed), LENET.shape, first, stop,
            progress=False)  # fmt: skip
        paths.append(str(tmp_path / f"{first}-{stop}.pt"))
        torch.save(shard, paths[-1])
    with pytest.raises(shards.ShardError, match=r"8-16.pt holds .* \(differing: settings.seed\)"):
        shards.gather(paths, LENET, settings)
    with pytest.raises(shards.ShardError, match=r"16-24.pt \(networks 16 to 23\): networks 8 "
                       "to 15 are in no shard"):  # fmt: skip
        shards.gather([paths[2], paths[0]], LENET, settings)


def test_shard_ranges_and_rounds():
    assert shards.ranges(40, 16) == [(0, 16), (16, 32), (32, 40)]
    assert shards.ranges(32, 16) == [(0, 16), (16, 32)]
    # the fewest whole shards with MIN_NETWORKS (22), then doubling up to the ceiling
    assert shards.rounds(16, 128) == [32, 64, 128]
    assert shards.rounds(64, 1000) == [64, 128, 256, 512, 1000]
    assert shards.rounds(16, 100, floor=50) == [64, 100]
    assert shards.rounds(500, 300) == [300]


def _load(change: dict):
    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    cfg["nads"].update(change)
    return nc.load_config(copy.deepcopy(cfg), SCHEMA)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"networks_per_shard": 100}, r"nads.networks_per_shard'.*: 100 is no multiple of "
         r"nads.networks_per_chunk \(64\)"),
        ({"until_converged": True}, r"nads.until_converged'.*say how many a shard has \(e.g. "
         r"networks_per_shard: 64\)"),
        ({"networks_per_shard": 0}, r"networks_per_shard.*0"),
    ],
)  # fmt: skip
def test_shard_settings_that_cannot_work_are_refused(change, message):
    with pytest.raises(nc.ConfigError, match=message):
        _load(change)


# -- in the workflow, run for real --------------------------------------------------------

CONFIG = {
    "architectures": {"lenet": {}},
    "nads": {"n_networks": 32, "networks_per_chunk": 8, "networks_per_shard": 16},
    "nad_pairs": {"architectures": ["lenet"], "indices": [0], "seeds": [0], "n_train": 100,
                  "n_test": 50, "train": {"epochs": 1}},
    # the evaluation a remedy's run makes, at the smallest sizes (seconds at the defaults)
    "analysis": {"n_points": 8, "margin_steps": 8, "cross_section": {"n_points": 1,
                 "resolution": 5}, "transitions": {"n_trajectories": 1, "n_points": 8}},
}  # fmt: skip
NADS = "results/nads/lenet.pt"


def _run(folder: Path, config: dict) -> list[str]:
    """Run the NAD job of `config` for real; the jobs it ran, as 'rule wildcards'."""
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    res = snakemake(folder, "--cores", "2", NADS)
    return [f"{rule} {wildcards}" for rule, wildcards, _ in jobs_run(res.stdout + res.stderr)]


def _shard_times(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns
            for p in (folder / "results/nads/shards/lenet").glob("*.pt")}  # fmt: skip


def test_raising_n_networks_computes_only_the_new_shards(tmp_path):
    config = copy.deepcopy(CONFIG)
    ran = _run(tmp_path, config)
    assert sorted(r for r in ran if r.startswith("nad_shard")) == [
        "nad_shard arch=lenet, first=0, stop=16",
        "nad_shard arch=lenet, first=16, stop=32",
    ]
    before = _shard_times(tmp_path)
    config["nads"]["n_networks"] = 48
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    plan = planned(tmp_path)
    assert plan["nad_shard"] == 1 and plan["nads"] == 1, plan
    ran = _run(tmp_path, config)
    assert [r for r in ran if r.startswith("nad_shard")] == [
        "nad_shard arch=lenet, first=32, stop=48"
    ]
    after = _shard_times(tmp_path)
    assert {k: after[k] for k in before} == before  # the first two shards untouched
    art = torch.load(tmp_path / NADS, weights_only=True)
    whole = compute_nads(partial(build, LENET), NadSettings(n_networks=48, networks_per_chunk=8),
                         LENET.shape, progress=False)  # fmt: skip
    _same(art, whole)
    assert art["networks"] == 48 and art["settings"]["n_networks"] == 48
    # anything else that defines the networks recomputes every shard
    config["nads"]["seed"] = 1
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    assert planned(tmp_path)["nad_shard"] == 3


def _damage(path: Path, data: bytes) -> None:
    """Write `data` over `path`, keeping its time (what Snakemake looks at)."""
    st = path.stat()
    path.write_bytes(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_damaged_shard_is_caught_and_a_failed_merge_keeps_the_nads_made_before(tmp_path):
    config = copy.deepcopy(CONFIG)
    _run(tmp_path, config)
    folder, good = tmp_path / "results/nads/shards/lenet", (tmp_path / NADS).read_bytes()
    shard = folder / "16-32.pt"
    whole = shard.read_bytes()
    # cut short, or another range's shard over it, its time kept: not up to date (0a58d4e:
    # "Nothing to be done", caught only by the next merge)
    for data in (whole[: len(whole) // 2], (folder / "0-16.pt").read_bytes()):
        _damage(shard, data)
        res = snakemake(tmp_path, "--cores", "2", NADS, check=False)
        assert res.returncode == 1 and "1 file(s) they stand on cannot be read" in res.stderr
        assert "results/nads/shards/lenet/16-32.pt" in res.stderr.split("cannot be read")[1]
    # the remedy as printed: the shard remade, the same NADs
    command(tmp_path, re.search(r"Remake them and what was made from them with: (.*)$",
                                res.stderr, re.M)[1])  # fmt: skip
    assert shard.read_bytes() == whole and (tmp_path / NADS).read_bytes() == good
    # more networks, and a merge that fails on a damaged earlier shard: the NADs made before
    # stay (0a58d4e: Snakemake deleted them with the failed job's outputs)
    _damage(folder / "0-16.pt", b"not a shard")
    config["nads"]["n_networks"] = 48
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    res = snakemake(tmp_path, "--cores", "2", NADS, check=False)
    assert res.returncode != 0 and (folder / "32-48.pt").exists()
    assert (tmp_path / NADS).read_bytes() == good
    assert "the NADs made before were put back" in res.stdout + res.stderr
    assert "so the next run remakes them" in res.stdout + res.stderr
    assert planned(tmp_path).get("nads") == 1  # and the next run remakes them
    # a forced merge that fails, its shards as before: the NADs put back are current, and the
    # text says so (10c1e0f: "the next run remakes them", then "Nothing to be done")
    config["nads"]["n_networks"] = 32
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    assert planned(tmp_path) == {}
    res = snakemake(tmp_path, "--cores", "2", NADS, "--forcerun", "nads", check=False)
    out = res.stdout + res.stderr
    assert res.returncode != 0 and (tmp_path / NADS).read_bytes() == good
    assert "they are as before this run, and the next run keeps them" in out, out[-3000:]
    assert planned(tmp_path) == {}
    # mended as the merge's message says, then remade as the put-back message says
    command(tmp_path, re.search(r"Rebuild it with: (.*?) \(traceback in", out)[1])
    command(tmp_path, re.search(r"once what failed is mended, remake them with: (\S.*?)$", out,
                                re.M)[1])  # fmt: skip
    assert (tmp_path / NADS).read_bytes() == good


def test_until_converged_stops_at_the_first_converged_round(tmp_path):
    config = copy.deepcopy(CONFIG)
    # rounds of 32 and 64 networks (shards of 16); LeNet's top-10 overlap grows with them
    config["nads"].update(n_networks=64, until_converged=True, min_overlap_top10=0.99)
    ran = _run(tmp_path, config)
    rounds = sorted(r for r in ran if r.startswith("nad_round"))
    assert rounds == [f"nad_round arch=lenet, networks={n}" for n in (32, 64)], ran
    art = json.loads((tmp_path / "results/nads/lenet.json").read_text())
    overlaps = [r["overlap_top10"] for r in art["rounds"]]
    assert art["networks"] == 64 and not any(r["converged"] for r in art["rounds"])
    # the last round says none comes after it, as a warning the run's end lists (0a58d4e:
    # "more networks: the next round" at the ceiling, and no warning)
    said = (tmp_path / "results/logs/nads/lenet.log").read_text()
    assert "WARNING: NADs of lenet did not converge by nads.n_networks (64 networks" in said
    assert "the next round" not in (tmp_path / "results/logs/nads/rounds/lenet/64.log").read_text()
    # not converged at the ceiling: raising it adds a round, and its shards (Snakemake cannot
    # see that through a checkpoint still to come: nad_goal makes it)
    config["nads"]["n_networks"] = 128
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    plan = planned(tmp_path)
    assert plan.get("nad_round") == 1 and plan.get("nad_shard") == 4 and plan["nads"] == 1, plan
    # a threshold the second round passes, under that ceiling: it stops there, and the third
    # round's shards are never computed
    threshold = (overlaps[0] + overlaps[1]) / 2 if overlaps[1] > overlaps[0] else overlaps[1]
    config["nads"]["min_overlap_top10"] = round(threshold, 6)
    ran = _run(tmp_path, config)
    art = json.loads((tmp_path / "results/nads/lenet.json").read_text())
    assert art["networks"] == 64, art["rounds"]
    assert [r["converged"] for r in art["rounds"]] == [False, True]
    assert not any(r.startswith("nad_shard") for r in ran), ran  # its shards were there
    saved = torch.load(tmp_path / NADS, weights_only=True)
    _same(saved, compute_nads(partial(build, LENET), NadSettings(n_networks=64,
          networks_per_chunk=8), LENET.shape, progress=False))  # fmt: skip
    assert not [job for job in planned(tmp_path) if job.startswith("nad")]  # nothing after it
    # converged: a higher ceiling computes no network nor round (the merge again, from the
    # same shards)
    config["nads"]["n_networks"] = 256
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    plan = planned(tmp_path)
    assert "nad_round" not in plan and "nad_shard" not in plan and plan["nads"] == 1, plan


# -- the command ----------------------------------------------------------------------------


def test_the_command_computes_shards_apart_and_puts_them_together(tmp_path):
    common = ["nads", "--model", "lenet", "--n-networks", "24", "--networks-per-chunk", "8",
              "--networks-per-shard", "8", "--shards", str(tmp_path / "sh")]  # fmt: skip
    nadpipe_here(*common, "--shard", "1")
    assert [p.name for p in (tmp_path / "sh").iterdir()] == ["8-16.pt"]
    res = nadpipe_here(*common, "--out", str(tmp_path / "a.pt"))
    assert "shard 1 (networks 8 to 15): kept" in res.stderr
    assert sorted(p.name for p in (tmp_path / "sh").iterdir()) == ["0-8.pt", "16-24.pt", "8-16.pt"]
    whole = compute_nads(partial(build, LENET), NadSettings(n_networks=24, networks_per_chunk=8),
                         LENET.shape, progress=False)  # fmt: skip
    _same(torch.load(tmp_path / "a.pt", weights_only=True), whole)
    res = nadpipe_here(*common, "--shard", "3", check=False)
    assert res.returncode == 2 and "--shard 3: 24 networks in shards of 8 are shards 0 to 2" in (
        res.stderr
    )
    res = nadpipe_here(*common[:-2], check=False)  # --networks-per-shard without --shards
    assert res.returncode == 2 and "--shards DIR and --networks-per-shard N go together" in (
        res.stderr
    )
    res = nadpipe_here(*common, "--seed", "1", "--out", str(tmp_path / "b.pt"), check=False)
    assert res.returncode == 1 and "differing: settings.seed" in res.stderr
