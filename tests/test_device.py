"""The device rule (nadpipe.backend): a job decides its device once and nothing below it makes a
tensor anywhere else.

On a CPU machine a bug of this kind (a tensor made without a device inside a job, which a GPU
run meets as "Input type (torch.FloatTensor) and weight type (torch.cuda.FloatTensor) should be
the same") is caught by running every job under `torch.device("meta")`: such a tensor lands on
the meta device and fails as soon as it meets the job's real tensors. The same jobs run on CUDA
where a GPU is present (marked gpu) and agree with the CPU.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import SCHEMA
from helpers import MEASURED, relu_units_820f241, run_every_job

from nadpipe.acceptance import DATA  # shared with `nadpipe doctor --gpu`
from nadpipe.backend import Backend, DeviceError, choose_device, setup
from nadpipe.models import build, relu_units
from nadpipe.nads import compute_nads
from nadpipe.settings import ModelSpec, NadSettings, Shape


def test_every_job_computes_on_its_device_only(micro_plan, micro_on_cpu, tmp_path):
    # a tensor made without a device below a job would land on "meta" and fail
    with torch.device("meta"):
        guarded = run_every_job(micro_plan, tmp_path, Backend(device="cpu"))
    assert set(guarded) == set(micro_on_cpu)
    for key, value in micro_on_cpu.items():
        other = guarded[key]
        if key.startswith("nads"):
            assert np.array_equal(value, other), key
        elif key.startswith("weights"):
            pairs = zip(value, other, strict=True) if isinstance(value, list) else [(value, other)]
            for a, b in pairs:
                assert all(torch.equal(a[k], b[k]) for k in a), key
        elif key.startswith("record"):
            assert value["history"][-1]["loss"] == other["history"][-1]["loss"], key
            assert value["device"] == "cpu" and value["deterministic"] is False
        elif key.startswith("rows"):
            cols = [c for c in value.columns if c in MEASURED or c.startswith("band_")]
            pd.testing.assert_frame_equal(value[cols], other[cols])
        else:
            assert all(np.array_equal(value[k], other[k]) for k in value), key
    rows = micro_on_cpu["rows nad_pairs"]
    assert rows["relu_units"].iloc[0] == 6 * 28 * 28 + 16 * 10 * 10 + 120 + 84  # LeNet, 2 ch.


def test_the_guard_catches_820f241s_relu_units_and_passes_todays():
    net = build(ModelSpec("lenet", {}, Shape(2, 32, 32), 2))
    x = torch.randn(4, 2, 32, 32)  # the job's data, on its device
    with torch.device("meta"), pytest.raises(RuntimeError, match="expected device"):
        relu_units_820f241(net, tuple(x.shape[1:]))  # fails at LeNet's first linear layer
    assert relu_units_820f241(net, tuple(x.shape[1:])) == 6 * 28 * 28 + 16 * 10 * 10 + 120 + 84
    with torch.device("meta"):
        assert relu_units(net, x) == 6 * 28 * 28 + 16 * 10 * 10 + 120 + 84


@pytest.mark.parametrize("estimator", ["gradient", "dipole"])
def test_nad_estimators_compute_on_their_device_only(estimator):
    settings = NadSettings(estimator=estimator, n_networks=4, windowed=False)
    spec = ModelSpec("lenet", {}, Shape(1, 32, 32), 1)
    plain = compute_nads(lambda: build(spec), settings, spec.shape, "cpu", progress=False)
    with torch.device("meta"):
        guarded = compute_nads(lambda: build(spec), settings, spec.shape, "cpu", progress=False)
    assert torch.equal(plain["vectors"], guarded["vectors"])


def test_a_job_given_a_gpu_it_cannot_use_stops_unless_told_to_use_the_cpu(monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the job would use the GPU it was given")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # a GPU slot, or SLURM's --gpus=1
    with pytest.raises(DeviceError, match=r"given GPU 0 .* set gpus.device: cpu"):
        setup(Backend())
    assert setup(Backend(device="cpu")).type == "cpu"  # doing what the message says
    with pytest.raises(DeviceError, match=r"--device asks for CUDA.*--device cpu"):
        choose_device("cuda", flag="--device")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert setup(Backend()).type == "cpu"  # no GPU given, none seen: the CPU, as asked (auto)


def test_a_jobs_setup_and_first_optimizer_import_nothing_the_warm_server_has_not():
    # torch.use_deterministic_algorithms imports torch._dynamo, and so does an optimizer's
    # first step: 2 s in every job forked from the warm server (0.3.0 before this: the default
    # study took 1.26x as long as 0.2.0). The server imports what a job's function names
    # before it forks the first (worker.warm); setup leaves the switch alone when it already
    # has the asked value. A figure's job imports neither torch._dynamo nor the training.
    code = """
import json, sys, torch
from nadpipe.backend import Backend, setup
from nadpipe.jobtable import job
from nadpipe.runner.worker import warm
out = {}
assert setup(Backend(device="cpu")).type == "cpu"
out["setup"] = "torch._dynamo" in sys.modules
warm("plot_nads", job)
out["figure"] = sorted(m for m in ("torch._dynamo", "nadpipe.train") if m in sys.modules)
warm("evaluate", job)  # not deterministic: its module, no more
out["evaluate"] = "torch._dynamo" in sys.modules
warm("train", job)
before = set(sys.modules)
net = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
net(torch.ones(1, 2)).sum().backward()
opt.step()
setup(Backend(device="cpu"))
out["train"] = sorted(m for m in set(sys.modules) - before if m.startswith("torch"))
print(json.dumps(out))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    said = json.loads(out.stdout.splitlines()[-1])
    expected = {"setup": False, "figure": [], "evaluate": False, "train": []}
    assert said == expected, out.stdout + out.stderr
    # a deterministic run's NAD and evaluation jobs switch it on (setup): the server imports it
    code = """
import os, sys
from nadpipe.backend import Backend, setup
from nadpipe.io import RUN_ENV as ENV
from nadpipe.jobtable import job
from nadpipe.runner.worker import warm
os.environ[ENV] = Backend(device="cpu", deterministic=True).to_env()
warm("evaluate", job)
print("torch._dynamo" in sys.modules)
before = set(sys.modules)
setup(Backend.from_env())
print(sorted(m for m in set(sys.modules) - before if m.startswith("torch")))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["True", "[]"], out.stdout + out.stderr


def test_a_cifar_configs_check_and_plan_import_no_torch(tmp_path):
    # every Snakemake command parses the config and plans: for a CIFAR study that read where
    # CIFAR-10's files lie from nadpipe.cifar, whose torch import was half of a 3.5 s dry run
    code = f"""
import sys
from nadpipe import config as nc, grid
raw = {{"nad_pairs": {{"enabled": False}}, "cifar10": {{"download": True, "root": "{tmp_path}"}},
       "cifar_nad": {{"enabled": True, "architectures": ["lenet"], "indices": [0]}}}}
cfg, _ = nc.load_config(raw, "{SCHEMA}")
files = grid.Plan(cfg, "{tmp_path}/results").cifar_files("cifar_nad")
print(len(files), "torch" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.split() == ["7", "False"], out.stdout + out.stderr


def test_a_job_in_a_process_of_its_own_imports_torch_only_when_it_uses_it():
    # a job SLURM starts (or any without the warm server) runs in a process of its own: the
    # figures', reports' and tables' jobs, a cluster's small ones, never import torch (job_log
    # did, to set its threads: 1.4 CPU-s a job here); a job that does gets the threads asked
    code = """
import json, os, sys
from nadpipe.jobtable import job
from nadpipe.runner.worker import job_log
out = {}
with job_log(None, threads=1):
    for target in ("aggregate", "plot",
                   "report_landing", "signatures"):
        job(target)
    out["torch"] = "torch" in sys.modules
    import torch
    out["threads"] = torch.get_num_threads()
print(json.dumps(out))
"""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout.splitlines()[-1]) == {"torch": False, "threads": 1}


@pytest.mark.gpu
def test_every_job_on_cuda_agrees_with_the_cpu(micro_plan, micro_on_cpu, tmp_path):
    # CUDA's generator draws other networks than the CPU's (two draws of 24 networks share
    # 0.06 of their top 5 NADs): the NADs of the CPU's networks, born there and moved over, so
    # that every later job compares like with like
    backend = Backend(device="cuda", deterministic=True)
    on_gpu = run_every_job(micro_plan, tmp_path, backend, born="cpu")
    for key, value in micro_on_cpu.items():
        other = on_gpu[key]
        if key.startswith("nads"):  # the same leading NADs (sign fixed), to float tolerance
            overlap = np.square(value[:5] @ other[:5].T).sum() / 5
            assert overlap > 0.99, key
        elif key.startswith("record"):
            assert other["device"] != "cpu" and other["deterministic"] is True
            assert abs(value["history"][-1]["loss"] - other["history"][-1]["loss"]) < 1e-3
        elif key.startswith("rows"):
            diff = (value["accuracy"] - other["accuracy"]).abs().max()
            assert round(diff * DATA["n_test"]) <= 2, (key, diff)  # images: no float edge


@pytest.mark.gpu
def test_deterministic_cuda_jobs_repeat_bit_for_bit(micro_plan, tmp_path):
    runs = [
        run_every_job(micro_plan, tmp_path / f"run{k}", Backend(device="cuda", deterministic=True))
        for k in (0, 1)
    ]
    for key, value in runs[0].items():
        if key.startswith("weights") and not isinstance(value, list):
            assert all(torch.equal(value[k], runs[1][key][k]) for k in value), key


@pytest.mark.parametrize("tf32", [False, True])
def test_tf32_flags_read_back_after_setup(tf32):
    # b879b52 set torch's newer fp32_precision switches; reading the long-standing flags then
    # raised ("a mix of the legacy and new APIs"), which user models, libraries and inductor do
    import torch

    from nadpipe.backend import setup

    setup(Backend(device="cpu", tf32=tf32))
    assert torch.backends.cudnn.allow_tf32 is tf32
    assert torch.backends.cuda.matmul.allow_tf32 is tf32
    assert torch.get_float32_matmul_precision() == ("high" if tf32 else "highest")
    assert torch.backends.cuda.matmul.fp32_precision == ("tf32" if tf32 else "ieee")
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=False,
                                    allow_tf32=not tf32):  # fmt: skip
        pass
    setup(Backend(device="cpu"))  # as the rest of the suite has it


def test_determinism_is_refused_where_cublas_started_without_its_workspace(monkeypatch):
    # cuBLAS reads CUBLAS_WORKSPACE_CONFIG when CUDA starts: b879b52 set it with setdefault in
    # every job's setup, too late for a process that had used CUDA, whose records then said
    # "deterministic"
    import torch

    from nadpipe.backend import CUBLAS_WORKSPACE, DeviceError, deterministic_cublas

    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)  # CUDA already started
    with pytest.raises(DeviceError, match="CUBLAS_WORKSPACE_CONFIG=:4096:8 python"):
        deterministic_cublas()
    # set after CUDA started, in the process: still too late (0a58d4e took it as deterministic);
    # as the advice says, Python started with it: deterministic
    code = ("import os, torch; torch.cuda.is_initialized = lambda: True; "
            f"os.environ['CUBLAS_WORKSPACE_CONFIG'] = '{CUBLAS_WORKSPACE}'; "
            "from nadpipe.backend import deterministic_cublas as d; d(); print('ok')")  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "CUBLAS_WORKSPACE_CONFIG"}
    late = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert "started CUDA before CUBLAS_WORKSPACE_CONFIG" in late.stderr, late.stderr[-2000:]
    env["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_WORKSPACE
    given = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert given.stdout == "ok\n", given.stderr
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG")
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)  # before CUDA: set here
    deterministic_cublas()
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == CUBLAS_WORKSPACE
