"""The acceptance check of a GPU machine (`nadpipe doctor --gpu`): what the test suite's stand-in
accelerator cannot prove, run on the real device, with the table docs/speed.md needs.

1. The micro study (one cell of every study) through the real Snakemake DAG on the CPU, then on
   CUDA with 1 and with 4 jobs per GPU, at sizes where its cells learn (LEARNS). A GPU draws
   other random networks than the CPU, so CUDA's NADs are of other networks (two draws of 24
   share little of their top NADs): the CUDA runs read the CPU run's NADs
   (architectures.NAME.nads_file), so that the rows that can be equal (every channel kept, of
   models that learned) compare like with like (within TOLERANCE), and CUDA computes the NADs of
   the CPU's networks, moved over, which must agree with the CPU's (top-5 overlap above 0.99).
2. A training killed with SIGKILL after its third epoch and run again: alone and as a batch of
   two cells, on CUDA with gpus.deterministic, it resumes and ends bit for bit where an
   uninterrupted run ends.
3. The NAD and training benchmarks (benchmarks/*.py) at sizes that finish in minutes.

It runs from a checkout (the workflow, its schema and the benchmarks live there) and writes
under a scratch directory. Without CUDA it says what it would run and fails.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

from .backend import Backend, _no_cuda_reason
from .io import RUN_ENV, load_torch
from .settings import Shape
from .studies import REGISTRY

# (name, what it checks) of every step, in order: printed before the steps run, and instead of
# them where there is no GPU
STEPS = [
    (
        "micro-cpu",
        "the micro study (one cell of every study) at 1000 samples and 10 epochs, where its "
        "cells learn, on the CPU (snakemake --cores 4)",
    ),
    (
        "micro-gpu1",
        "the same on CUDA on the CPU's NADs, 1 job per GPU (--resources gpu=1): the rows of "
        "models that learned agree with the CPU; CUDA's NADs of the CPU's networks agree "
        "with the CPU's",
    ),
    (
        "micro-gpu4",
        "the same on CUDA, 4 jobs per GPU (--resources gpu=4): rows agree with the CPU",
    ),
    (
        "micro-fp32",
        "the same on CUDA in float32 (train.precision fp32; the GPU runs above train in bf16, "
        "train.precision auto): rows agree with the CPU, so bf16 changes no finding",
    ),
    ("resume-alone", "LeNet killed after epoch 3 on CUDA and resumed: equals an uninterrupted run"),
    ("resume-batch", "a batch of two LeNet cells killed and resumed likewise"),
    ("bench-nads", "python benchmarks/nads.py --models lenet resnet18 --networks 64"),
    (
        "bench-train",
        "python benchmarks/train.py --models mlp lenet resnet18 --n 4096 --variants (float32 "
        "and bf16 samples/s)",
    ),
]
# |accuracy on CUDA - on the CPU| of a row that can be equal: 5 % of the test images (20 of the
# doctor's 400), compared in images (counted, not as floats: 2/48 computed two ways differs in
# its last bit). Float rounding moves a learned cell by a few images (the H100 at 0.10.1: within
# 3 % on the micro study's 48); a GPU that computes wrongly leaves a cell at chance, 50 % off.
TOLERANCE = 0.05
# a model compared on a GPU learned clearly: test accuracy half the way from chance (0.5) to 1
CLEARLY_LEARNED = 0.75
MODEL = ("arch", "variant", "seed")  # the columns that name one trained model in a summary


def plan_text() -> str:
    return "\n".join(f"  {k + 1}. {name}: {what}" for k, (name, what) in enumerate(STEPS))


def checkout() -> Path | None:
    """The checkout this library runs from (an editable install), else None."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "Snakefile").exists() and (root / "benchmarks").is_dir() else None


def commit(root: Path) -> str:
    res = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return res.stdout.strip() or "unknown"


DATA = {"n_train": 96, "n_test": 48}
TRAIN = {"epochs": 2, "batch_size": 32}
# the doctor's micro study: sizes at which its cells learn. At the micro study's own (96 samples,
# 2 epochs) every cell is at chance on the CPU and on CUDA alike (the H100 at 0.10.1: test
# accuracies 0.19 to 0.54), so rows that agree prove only that the jobs ran
LEARNS = {"n_train": 1000, "n_test": 400, "epochs": 10}


def learning_sizes() -> dict:
    """The blocks the doctor merges over the micro config (`_snakemake`'s `change`): every
    study, and the CIFAR-10-like files, at LEARNS' sizes."""

    sizes = {k: LEARNS[k] for k in ("n_train", "n_test")}
    change: dict = {"cifar10": dict(sizes)}
    for name, entry in REGISTRY.items():
        block = {k: v for k, v in sizes.items() if k in entry.data_keys}
        change[name] = {**block, "train": {**TRAIN, "epochs": LEARNS["epochs"]}}
    return change


def micro_config(cifar_root: str) -> dict:
    """The micro study: one cell of every study (its entry's `micro` block), every measure on,
    sizes a CPU runs in seconds (on CIFAR-10-like files written by
    nadpipe.cifar.write_cifar10_like)."""

    one = {"seeds": [0], "train": TRAIN}
    config = {
        "nads": {"n_networks": 24},
        "architectures": {"mlp": {"model": "mlp", "kwargs": {"hidden": [16]}}},
        "analysis": {
            "n_points": 8,
            "margin_steps": 8,
            "cross_section": {"n_points": 1, "resolution": 5},
            "transitions": {"n_trajectories": 1, "n_points": 8},
            "nad_bands": {"enabled": True, "bands": [[0, 9], [10, 1023]]},
        },
        "cifar10": {"root": cifar_root, "verify_md5": False, "n_train": 96, "n_test": 48},
    }
    for name, entry in REGISTRY.items():
        sizes = {k: v for k, v in DATA.items() if k in entry.data_keys}
        config[name] = {"enabled": True, **entry.micro, **sizes, **one}
    return config


def with_nads_of(config: dict, results: Path) -> dict:
    """`config` reading the NADs a run wrote under `results` (architectures.NAME.nads_file)
    instead of computing its own: the same NADs whatever networks this device would draw."""
    config = json.loads(json.dumps(config))
    for npy in sorted((results / "nads").glob("*.npy")):
        config["architectures"].setdefault(npy.stem, {})["nads_file"] = str(npy.resolve())
    return config


def _snakemake(
    root: Path,
    work: Path,
    device: str,
    *extra: str,
    nads_of: Path | None = None,
    change: dict | None = None,
) -> tuple[float, Path]:
    """The micro study in `work` with gpus.device `device` (reading the NADs of the results
    folder `nads_of`; `change` merged over its top-level blocks): (seconds, its results
    folder)."""
    # deferred: they load torch and yaml, which importing acceptance does not
    import yaml

    from .cifar import write_cifar10_like

    work.mkdir(parents=True, exist_ok=True)
    config = micro_config(str(work / "cifar")) | {"gpus": {"device": device}}
    for block, values in (change or {}).items():
        config[block] = {**config.get(block, {}), **values}
    files = {k: config["cifar10"][k] for k in ("n_train", "n_test")}
    write_cifar10_like(str(work / "cifar"), **files, seed=2)
    if nads_of is not None:
        config = with_nads_of(config, nads_of)
    (work / "micro.yaml").write_text(yaml.safe_dump(config))
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(root / "Snakefile"),
        "-d",
        str(work),
        "--configfile",
        str(work / "micro.yaml"),
        "--cores",
        "4",
        *extra,
    ]
    start = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=work)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{(res.stdout + res.stderr)[-4000:]}")
    return time.perf_counter() - start, work / "results-micro"  # --configfile micro.yaml


def compare_summaries(cpu: Path, gpu: Path) -> tuple[float, set[str], int]:
    """Largest |accuracy difference| between the summaries of every study under two results
    folders, over the rows that can be equal, as a fraction of each row's test images; the
    devices the second ran on; how many rows it compared. Rows that can be equal: those with
    every channel kept (the study's first condition) of models that learned on the CPU
    (`clearly_learned`). (Which of two identical channels a model reads, as in a pairs cell
    (i, i), is a coin; a model at chance agrees with anything.) Fails where no row can be
    compared."""
    # deferred: it loads pandas, which importing acceptance does not
    import pandas as pd

    key = [*MODEL, "split", "condition"]
    found = sorted(p.relative_to(cpu) for p in cpu.glob("*/summary.parquet"))
    if not found:
        raise RuntimeError(f"no summary under {cpu}")
    diff, devices, compared = 0.0, set(), 0
    for rel in found:
        a, b = pd.read_parquet(cpu / rel), pd.read_parquet(gpu / rel)
        m = a.merge(b, on=key, suffixes=("_cpu", "_gpu"))
        if len(m) != len(a) or len(a) != len(b):
            raise RuntimeError(f"{rel}: other rows on the GPU ({len(a)}, {len(b)}, {len(m)})")
        devices |= set(b["device"])
        full = next(iter(REGISTRY[rel.parent.name].conditions(Shape(1, 32, 32))))
        learned = clearly_learned(a, full)
        m = m[m["condition"] == full]
        m = m[[k in learned for k in zip(*(m[c] for c in MODEL), strict=True)]]
        images = (m["accuracy_cpu"] - m["accuracy_gpu"]).abs() * m["n_test_cpu"]
        diff = max(diff, float((images.round(6) / m["n_test_cpu"]).max()) if len(m) else 0.0)
        compared += len(m)
    if not compared:
        raise RuntimeError(
            f"no model of {cpu} learned (every one at chance): agreeing rows would prove nothing"
        )
    return diff, devices, compared


def clearly_learned(summary, full: str) -> set[tuple]:
    """(arch, variant, seed) of the models of a (CPU's) summary that learned clearly, read from
    their rows with every channel kept (`full`, the study's first condition): the training did
    (`outcome`), and the test accuracy lies at least half the way from chance (two classes) to
    1. A model that fits its training set and guesses on the test set (the micro study's Fourier
    cell) agrees with anything on the test set; one at the edge of learning is a coin that
    CUDA's rounding tosses again (LeNet on NAD 1000 twice, 48 networks: test 0.544, train 0.74
    on the CPU, and 9 % apart on the train set on an H100 at a22ca86), and 0.544 lies within a
    hair of findings.at_chance's bar (0.547 on 1000 images), so that bar cannot tell it from
    learned on every machine."""
    # deferred: it loads pandas, which importing acceptance does not
    from .findings import FIT, outcomes

    rows = summary[summary["condition"] == full]

    def learned(model) -> bool:
        test = model[model["split"] == "test"]
        return bool(
            (outcomes(model["outcome"]) == FIT).all()
            and len(test)
            and float(test["accuracy"].min()) >= CLEARLY_LEARNED
        )

    return {k for k, model in rows.groupby(list(MODEL)) if learned(model)}


def nads_of_the_cpus_networks(cpu: Path, work: Path) -> float:
    """The least top-5 overlap, over the micro study's architectures, of CUDA's NADs of the CPU
    run's networks (born on the CPU, moved over) with the CPU run's NADs under `cpu`."""
    # deferred: they load torch, numpy, jsonschema and yaml, which importing acceptance does not
    import numpy as np
    import yaml

    from . import config as nc
    from .grid import Plan
    from .jobs import nads_job

    cfg, _ = nc.load_config(yaml.safe_load((cpu / "config.yaml").read_text()), _schema())
    plan, least = Plan(cfg), 1.0
    work.mkdir(parents=True, exist_ok=True)
    for arch in plan.nad_architectures():
        paths = [str(work / f"{arch}.{ext}") for ext in ("pt", "npy", "json")]
        nads_job(plan.nad_job(arch), *paths, backend=Backend(device="cuda"), born="cpu")
        a, b = np.load(cpu / "nads" / f"{arch}.npy"), np.load(paths[1])
        least = min(least, float(np.square(a[:5] @ b[:5].T).sum() / 5))
    return least


def _schema() -> Path:
    root = checkout()
    if root is None:
        raise RuntimeError("nadpipe doctor --gpu runs from a checkout (pip install -e .)")
    return root / "workflow" / "schemas" / "config.schema.yaml"


RESUME = """
import pickle, sys
from nadpipe import jobs
target, args = pickle.load(open(sys.argv[1], "rb"))
print(getattr(jobs, target)(*args), flush=True)
"""


def _resume(work: Path, batched: bool, device: str = "cuda", n_train: int = 20000) -> str:
    """Kill a training on `device` after its third epoch, run it again, compare with a whole run
    (two cells trained together by a batch's job when `batched`)."""

    # deferred: it loads torch, which importing acceptance does not
    import torch

    jobs = _resume_jobs(n_train)
    env = {**os.environ, RUN_ENV: Backend(device=device, deterministic=True).to_env()}
    results = {}
    for run in ("whole", "killed"):
        here = work / run
        here.mkdir(parents=True, exist_ok=True)
        if batched:  # two cells by a batch's job, into their ahead files
            checkpoint, result = here / "batch.ckpt", here / "m.ahead"
            aheads = [str(result), str(here / "s.ahead")]
            call = ("train_together_job", (jobs, None, aheads, str(checkpoint)))
        else:
            checkpoint, result = here / "m.pt.ckpt", here / "m.pt"
            call = ("train_job", (jobs[0], None, [str(result)], [str(here / "m.json")]))
        args = here / "args.pkl"
        args.write_bytes(pickle.dumps(call))

        def start(args=args, here=here):
            cmd = [sys.executable, "-c", RESUME, str(args)]
            pipe = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True}
            return subprocess.Popen(cmd, cwd=here, env=env, **pipe)

        if run == "killed":
            _kill_after_third_epoch(start(), checkpoint)
        proc = start()
        out = proc.communicate()[0]
        if proc.returncode != 0:
            raise RuntimeError(
                f"the {run} training failed (exit {proc.returncode}):\n{out[-3000:]}"
            )
        if run == "killed" and "resuming from" not in out:
            raise RuntimeError(f"the killed training did not resume:\n{out[-3000:]}")
        found = load_torch(result)
        results[run] = (
            (found["state"], found["record"])
            if batched
            else (found, json.loads((here / "m.json").read_text()))
        )
    (wa, _), (wb, rb) = results["whole"], results["killed"]
    same = all(torch.equal(wa[k], wb[k]) for k in wa)
    if not same:
        raise RuntimeError("the resumed training's weights differ from the uninterrupted run's")
    return f"bit-identical weights, trained_together {rb['trained_together']}, on {rb['device']}"


def _resume_jobs(n_train: int) -> list:
    """The resume step's trainings: the first two cells of a study whose data need neither NADs
    nor CIFAR-10, LeNet on `n_train` samples for 12 epochs."""
    # deferred: it loads jsonschema, which importing acceptance does not
    from .grid import TrainJob
    from .settings import ModelSpec, Shape, TrainSettings
    from .studies import REGISTRY, DataSpec

    name, entry = next((n, e) for n, e in REGISTRY.items() if not e.needs_nads | e.needs_cifar)
    sizes = {"n_train": n_train, "n_test": 100}
    shape = Shape(1, 32, 32)
    settings = tuple({**entry.data_settings(entry.settings(), "lenet"), **sizes}.items())
    return [
        TrainJob(
            name,
            "lenet",
            v.path,
            (0,),
            ModelSpec("lenet", {}, shape, 2),
            TrainSettings(epochs=12, lr_max=0.05),
            (DataSpec(name, v.path, 0, shape, settings),),
            None,
            ("lenet", name, v.path),
        )
        for v in entry.variants(entry.settings())[:2]
    ]


def _kill_after_third_epoch(proc: subprocess.Popen, checkpoint: Path) -> None:
    """SIGKILL a training once its checkpoint says three epochs are done."""
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        try:  # the checkpoint itself: atomic_write's temporary files have other names
            if load_torch(checkpoint).get("done", 0) >= 3:
                break
        except (OSError, RuntimeError, EOFError):  # not written yet
            pass
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    out = proc.communicate()[0]
    if proc.returncode != -signal.SIGKILL:
        raise RuntimeError(f"the training to kill ended before its third epoch:\n{out[-3000:]}")


def _micro_gpu(
    root: Path, work: Path, cpu: Path | None, jobs_per_gpu: str, precision: str = "auto"
) -> str:
    """The doctor's micro study on CUDA on the CPU run's NADs, compared with it, its training
    in `precision` (train.precision)."""
    if cpu is None:
        raise RuntimeError("the CPU's micro study did not finish: nothing to compare with")
    args = ("--resources", f"gpu={jobs_per_gpu}")
    change = learning_sizes()
    for block in change.values():
        if "train" in block:
            block["train"] = {**block["train"], "precision": precision}
    _, summary = _snakemake(root, work, "cuda", *args, nads_of=cpu, change=change)
    diff, devices, rows = compare_summaries(cpu, summary)
    if diff > TOLERANCE or "cpu" in devices:
        raise RuntimeError(f"accuracies differ by {diff:.1%} of the test images on {devices}")
    return (
        f"accuracies of {rows} rows of models that learned within {diff:.1%} of the test images "
        f"of the CPU's on {devices}"
    )


def _bench(root: Path, script: str, *args: str) -> str:
    res = subprocess.run(
        [sys.executable, str(root / "benchmarks" / script), *args], capture_output=True, text=True
    )
    if res.returncode != 0:
        raise RuntimeError(f"benchmarks/{script} failed:\n{res.stderr[-3000:]}")
    return res.stdout.strip()


def gpu_window(scratch: Path, say=print) -> int:
    """Run every step on this machine's GPU; print the table for docs/speed.md. 0 when every
    step passed, 1 otherwise."""
    # deferred: it loads torch, which importing acceptance does not
    import torch

    root = checkout()
    if not torch.cuda.is_available():
        say(f"nadpipe doctor --gpu: no GPU here: {_no_cuda_reason()}. On a GPU machine it runs:")
        say(plan_text())
        return 1
    if root is None:
        say(
            "nadpipe doctor --gpu runs from a checkout (pip install -e .): the workflow and the "
            "benchmarks live there"
        )
        return 1
    name = torch.cuda.get_device_name(0)
    say(f"nadpipe doctor --gpu on {name}, commit {commit(root)}; scratch {scratch}")
    say(plan_text())
    rows, failed = [], 0
    cpu_summary = None
    for step, _ in STEPS:
        start = time.perf_counter()
        try:
            if step == "micro-cpu":
                _, cpu_summary = _snakemake(root, scratch / step, "cpu", change=learning_sizes())
                result = "finished"
            elif step == "micro-fp32":
                result = _micro_gpu(root, scratch / step, cpu_summary, "1", "fp32")
            elif step.startswith("micro-gpu"):
                result = _micro_gpu(root, scratch / step, cpu_summary, step[-1])
                if step == "micro-gpu1":
                    overlap = nads_of_the_cpus_networks(cpu_summary, scratch / "nads-of-cpu")
                    if overlap <= 0.99:
                        raise RuntimeError(
                            f"CUDA's NADs of the CPU's networks: top-5 overlap "
                            f"{overlap:.4f} with the CPU's"
                        )
                    result += f"; CUDA's NADs of the CPU's networks: top-5 overlap {overlap:.4f}"
            elif step.startswith("resume"):
                result = _resume(scratch / step, batched=step.endswith("batch"))
            elif step == "bench-nads":
                result = _bench(
                    root, "nads.py", "--models", "lenet", "resnet18", "--networks", "64"
                )
            else:
                # 4 096 samples a model (its default on a GPU, 20 480, ran past 97 s on an H100)
                result = _bench(
                    root,
                    "train.py",
                    *("--models", "mlp", "lenet", "resnet18", "--n", "4096", "--variants"),
                )
            ok = "pass"
        except Exception as e:  # noqa: BLE001 -- every step is reported, the others still run
            result, ok = str(e), "FAIL"
            failed += 1
        seconds = time.perf_counter() - start
        rows.append((step, ok, seconds, result))
        say(f"{step}: {ok} ({seconds:.0f} s)\n{result}")
    say("\n| step | result | seconds | figures |\n|---|---|---|---|")
    for step, ok, seconds, result in rows:
        first = result.splitlines()[0] if result else ""
        say(f"| {step} | {ok} | {seconds:.0f} | {first} |")
    say(f"\n(device {name}, nadpipe commit {commit(root)}; full benchmark output above)")
    (scratch / "doctor-gpu.json").write_text(json.dumps(rows, indent=1))
    return 1 if failed else 0
