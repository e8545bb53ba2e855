"""NADs computed once for a lab (README, "NADs computed once for a lab"): the NAD jobs in
Snakemake's output cache, run for real. Two configs that differ in their seeds compute the NADs
once; a third with another n_networks computes them again; what the cache gives is byte-equal to
NADs computed without it."""

import filecmp
import json
import os

import yaml
from helpers import TINY, snakemake

from nadpipe.provenance import source_hash

CONFIGS = {
    "a": {**TINY, "results": "a"},
    "b": {**TINY, "results": "b", "nad_pairs": {**TINY["nad_pairs"], "seeds": [1]}},
    "c": {**TINY, "results": "c", "nads": {**TINY["nads"], "n_networks": 32}},
    "plain": {**TINY, "results": "plain"},  # the same NADs as a's, without the cache
}


def test_a_second_config_takes_the_nads_from_the_cache_and_another_size_does_not(tmp_path):
    env = {**os.environ, "SNAKEMAKE_OUTPUT_CACHE": str(tmp_path / "cache")}
    (tmp_path / "cache").mkdir()
    for name, config in CONFIGS.items():
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(config))
        cache = [] if name == "plain" else ["--cache"]
        snakemake(
            tmp_path,
            "--configfile",
            str(tmp_path / f"{name}.yaml"),
            "--cores",
            "2",
            *cache,
            env=env,
        )
    # a NAD job that did its work left what it used beside its log
    ran = {n: (tmp_path / n / "logs/nads/mlp.usage.tsv").exists() for n in CONFIGS}
    assert ran == {"a": True, "b": False, "c": True, "plain": True}, ran
    for ext in ("npy", "pt"):
        assert filecmp.cmp(tmp_path / f"b/nads/mlp.{ext}", tmp_path / f"plain/nads/mlp.{ext}",
                           shallow=False), ext  # fmt: skip
    # the summary beside them: the same but for the time a network took
    said = [json.loads((tmp_path / f"{n}/nads/mlp.json").read_text()) for n in ("b", "plain")]
    assert [{k: v for k, v in s.items() if k != "seconds_per_network"} for s in said] == [
        {k: v for k, v in said[1].items() if k != "seconds_per_network"}
    ] * 2
    assert not filecmp.cmp(tmp_path / "c/nads/mlp.npy", tmp_path / "a/nads/mlp.npy", shallow=False)
    assert len(list((tmp_path / "cache").glob("*.npy"))) == 2
    # what keys them besides the job's spec: this library's source among it
    code = json.loads((tmp_path / "b/.nadpipe/nad_code.json").read_text())
    assert code["nadpipe"] == source_hash() and code["accelerated"] is False
    # and nothing is remade by it: the next run of a has nothing to do
    a = str(tmp_path / "a.yaml")
    res = snakemake(tmp_path, "--configfile", a, "--cores", "2", "--cache", "-n", env=env)
    assert "Nothing to be done" in res.stdout + res.stderr
