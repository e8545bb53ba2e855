"""The GPU path on a CPU: every job of every study on the stand-in accelerator (tests/standin.py),
so through the branches a GPU takes (cells trained together, NAD networks together and born on
the device, with and without the windowed plan), asserting what a GPU run needs:
- no CPU tensor meets a device tensor, no CPU generator feeds a device factory (it raises);
- no synchronising read inside a training step or a NAD chunk: the reads are counted and must
  not grow with the number of steps or chunks;
- results equal the CPU path's within float tolerance;
- every file a job writes loads without the device (a plain torch.load).
Each defect found by reading b879b52 that the stand-in can see has a test here that fails on it.
"""

import pickle

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import MEASURED, relu_units_820f241, run_every_job
from standin import DEVICE, NAME, DeviceMixError, Record, require, standin
from torch import nn

from nadpipe.acceptance import DATA
from nadpipe.backend import Backend, accelerated, autocast_available, setup
from nadpipe.evaluate import accuracy_and_loss
from nadpipe.models import build
from nadpipe.nads import compute_nads, draw_networks
from nadpipe.settings import ModelSpec, NadSettings, Shape, TrainSettings
from nadpipe.train import _autocast, applied, can_stack, train


@pytest.fixture(scope="module", autouse=True)
def _stand_in():
    require()  # every test here is of the stand-in (skipped where CUDA is: standin.WITH_CUDA)


@pytest.fixture(scope="module")
def on_standin(micro_plan, tmp_path_factory):
    out = tmp_path_factory.mktemp("standin")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(out)
        with standin() as record:  # cells of stackable models by a batch's job, then claimed
            found = run_every_job(micro_plan, out, Backend(device="standin", batch_cells=4))
    return found, record


def test_the_standin_is_an_accelerator_that_is_neither_the_cpu_nor_the_default():
    assert DEVICE.type != "cpu" and accelerated(DEVICE)
    assert torch.get_default_device() != DEVICE
    with standin() as record:
        x = torch.randn(3, 4).to(DEVICE)
        y = torch.zeros(3, 4, device=x.device) + x * 2  # computed, on the device
        assert y.device == DEVICE
        assert torch.equal(y.cpu(), 2 * x.cpu())
        with pytest.raises(DeviceMixError, match="CPU tensor of shape"):
            y + torch.ones(3, 4)
        with pytest.raises(DeviceMixError, match="CPU generator"):
            torch.randn(3, device=DEVICE, generator=torch.Generator().manual_seed(0))
        assert float(y.sum()) == pytest.approx(float(2 * x.cpu().sum()))
        _ = y[y > 0]
    assert len(record.h2d) == 1 and len(record.d2h) == 3
    assert any("boolean-mask" in s for s in record.syncs) and len(record.syncs) == 2


def test_every_job_of_every_study_runs_on_the_standin_and_agrees_with_the_cpu(
    micro_on_cpu, on_standin
):
    found, record = on_standin
    assert set(found) == set(micro_on_cpu)
    for key, value in micro_on_cpu.items():
        other = found[key]
        if key.startswith("nads"):  # together and born on the device: the same networks
            overlap = np.square(value[:5] @ other[:5].T).sum() / 5
            assert overlap > 0.999, key
        elif key.startswith("weights"):
            pairs = zip(value, other, strict=True) if isinstance(value, list) else [(value, other)]
            for a, b in pairs:
                for name in a:
                    assert b[name].device.type == "cpu" and type(b[name]) is torch.Tensor
                    torch.testing.assert_close(b[name], a[name], atol=1e-4, rtol=1e-3)
        elif key.startswith("record"):
            assert other["device"] == "standin", key
            assert other["history"][-1]["loss"] == pytest.approx(
                value["history"][-1]["loss"], rel=1e-4, abs=1e-5
            ), key
        elif key.startswith("rows"):
            diff = (value["accuracy"] - other["accuracy"]).abs().max()
            assert diff <= 1 / DATA["n_test"], (key, diff)
            cols = [c for c in value.columns if c in MEASURED]
            pd.testing.assert_frame_equal(
                value[cols], other[cols], check_exact=False, atol=1e-3, rtol=1e-3
            )
    # the one-seed cells of stackable models were trained in a batch (the GPU default)
    assert any(found[k]["trained_together"] > 1 for k in found if k.startswith("record")), {
        k: found[k]["trained_together"] for k in found if k.startswith("record")
    }
    assert not record.d2h or all("save" not in w for w in record.d2h)


def test_what_the_jobs_write_loads_without_the_device(on_standin, tmp_path):
    found, _ = on_standin
    for key, value in found.items():
        if key.startswith("weights"):
            for state in value if isinstance(value, list) else [value]:
                assert all(type(t) is torch.Tensor and t.device.type == "cpu"
                           for t in state.values())  # fmt: skip


def _step_syncs(record: Record, **size) -> tuple[int, int, int]:
    """Synchronising reads, host-to-device and device-to-host copies of one training run of
    `size` (epochs, n, batch_size)."""
    torch.manual_seed(0)
    nets = [build(ModelSpec("mlp", {"hidden": [8]}, Shape(1, 4, 4), 2)) for _ in range(3)]
    xs = torch.randn(3, size["n"], 1, 4, 4)
    ys = torch.randint(0, 2, (3, size["n"]))
    settings = TrainSettings(epochs=size["epochs"], batch_size=size["batch_size"], grad_clip=1.0)
    record.clear()
    with torch.no_grad():
        nets = [n.to(DEVICE) for n in nets]
    xs, ys = xs.to(DEVICE), ys.to(DEVICE)
    record.clear()
    train(nets, xs, ys, settings, [0, 1, 2], progress=False)
    return len(record.syncs), len(record.h2d), len(record.d2h)


def test_no_synchronising_read_or_copy_inside_a_training_step():
    # 4 steps or 32: the same reads and copies (per epoch: its log line, the batch order);
    # b879b52 passed with index tensors left on the CPU (a copy every step) or .cpu() of the
    # outputs and labels every step for the accuracy count: both fail here
    with standin() as record:
        few = _step_syncs(record, epochs=2, n=64, batch_size=32)  # 4 steps
        many = _step_syncs(record, epochs=2, n=64, batch_size=4)  # 32 steps
    assert few == many, (few, many, record.h2d, record.d2h, record.syncs)
    assert few[0] <= 2 * 3 * 2  # loss and accuracy of 3 members in 2 epochs


def test_no_synchronising_read_or_copy_inside_a_nad_chunk():
    # 4 networks in 1 chunk or in 2, their probes in one chunk or in four: what crosses to
    # and from the device, and the host's waits, stay the same (b879b52: every chunk's
    # networks copied tensor by tensor; .cpu() of each probe chunk's logits passed), one
    # network after another (the default) and a chunk's networks in one vmapped call; on
    # 16 x 16 inputs, whose 512 probes a network fill one chunk of 512 or four of 128
    spec = ModelSpec("lenet", {}, Shape(1, 16, 16), 1)
    counts, convs = {}, {}
    # and the chunk's networks as one grouped network (nadpipe.grouped: the accelerator's
    # default), besides one after another (windowed or plain) and vmapped together
    ways = [(windowed, together, grouped) for windowed in (True, False)
            for together, grouped in ((False, False), (True, False), (False, True))]  # fmt: skip
    with standin() as record:
        for windowed, together, grouped in ways:
            # and 8 networks in 1 chunk: no read per network (a .item() per network inside a
            # chunk passed while the network count was held at 4)
            for n, per_chunk, probes in ((4, 4, 512), (4, 2, 512), (4, 4, 128), (8, 8, 128)):
                settings = NadSettings(n_networks=n, networks_per_chunk=per_chunk,
                                       windowed=windowed, batch_size=probes,
                                       grouped=grouped)  # fmt: skip
                record.clear()
                compute_nads(lambda: build(spec), settings, spec.shape, DEVICE, progress=False,
                             together=together)  # fmt: skip
                if grouped:  # one network's convolutions for the whole chunk
                    convs[windowed, n, per_chunk, probes] = record.ops["conv2d.default"]
                counts[windowed, together, grouped, per_chunk, probes] = (
                    len(record.h2d),
                    len(record.syncs) // (n // per_chunk),
                    len(record.d2h) // (n // per_chunk),
                )
    for way in ways:
        assert len({v for k, v in counts.items() if k[:3] == way}) == 1, counts
    for windowed in (True, False):  # 8 networks as one: as many convolutions as 4 as one
        assert convs[windowed, 8, 8, 128] == convs[windowed, 4, 4, 128], convs
    for together, grouped in ((False, False), (True, False), (False, True)):  # the points x0
        assert counts[False, together, grouped, 4, 512][0] == 1, counts  # (b879b52: 81)


def test_no_synchronising_read_inside_an_evaluation_batch():
    # 64 samples in batches of 32 or of 4: the same reads (a .item() or float() of each
    # batch's loss passed before: no test counted evaluation's reads)
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(16, 2))
    x, y = torch.randn(64, 1, 4, 4), torch.randint(0, 2, (64,))
    counts = []
    with standin() as record:
        net, x, y = net.to(DEVICE), x.to(DEVICE), y.to(DEVICE)
        for batch in (32, 4):
            record.clear()
            accuracy_and_loss(net, x, y, batch)
            counts.append((len(record.syncs), len(record.h2d), len(record.d2h)))
    assert counts[0] == counts[1] and counts[0][0] <= 2, counts


@pytest.mark.parametrize("deterministic", [True, False])
def test_the_backend_switches_are_what_the_config_says_after_set_up(deterministic):
    # asserted after set-up on the stand-in (cuDNN's flags forced off whatever
    # gpus.deterministic says passed every test before)
    before = (torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark,
              torch.are_deterministic_algorithms_enabled())  # fmt: skip
    try:
        with standin():
            setup(Backend(device=NAME, deterministic=deterministic, cudnn_benchmark=True))
        assert torch.backends.cudnn.deterministic is deterministic
        assert torch.backends.cudnn.benchmark is not deterministic
        assert torch.are_deterministic_algorithms_enabled() is deterministic
    finally:
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = before[:2]
        torch.use_deterministic_algorithms(before[2])


def test_training_autocasts_to_bfloat16_not_float16():
    # float16 needs loss scaling, which nadpipe does not do: its gradients underflow on CUDA.
    # The CPU has autocast, so the same context is entered here
    with _autocast(torch.device("cpu"), True):
        assert torch.is_autocast_enabled("cpu")
        assert torch.get_autocast_dtype("cpu") is torch.bfloat16
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype is torch.bfloat16


def test_nad_networks_are_born_on_the_device_without_per_tensor_copies():
    spec = ModelSpec("vgg11", {}, Shape(3, 32, 32), 1)
    settings = NadSettings(n_networks=2)
    tensors = len(build(spec).state_dict())
    with standin() as record:
        nets = draw_networks(lambda: build(spec), settings, range(2), DEVICE)
        assert all(p.device == DEVICE for n in nets for p in n.state_dict().values())
    # b879b52: 2 x 62 copies; now none but batch norm's step counters (torch.tensor(0, device))
    assert tensors == 62 and record.h2d == [] and len(record.h2d_scalars) == 2 * 8
    plain = draw_networks(lambda: build(spec), settings, range(2), "cpu")
    # the same seed on the same kind of device: the same network, bit for bit
    with standin():
        again = draw_networks(lambda: build(spec), settings, range(2), DEVICE)
        mine, theirs = again[1].state_dict().values(), plain[1].state_dict().values()
        pairs = [(a.cpu(), b) for a, b in zip(mine, theirs, strict=True)]
    assert all(torch.equal(a, b) for a, b in pairs)


class Noisy(nn.Module):
    """No batch norm, but dropout in its forward: b879b52's can_stack let it into a batch."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(16, 8), nn.ReLU(), nn.Dropout(0.5))
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        return self.head(self.body(x))


def test_a_model_with_dropout_trains_in_a_batch_request_one_after_another():
    x = torch.randn(2, 1, 4, 4)
    assert not can_stack(Noisy(), x)
    assert can_stack(nn.Sequential(nn.Flatten(), nn.Linear(16, 2)), x)
    torch.manual_seed(0)
    nets = [Noisy() for _ in range(2)]
    xs, ys = torch.randn(2, 32, 1, 4, 4), torch.randint(0, 2, (2, 32))
    settings = TrainSettings(epochs=1, batch_size=16)
    with standin():
        nets = [n.to(DEVICE) for n in nets]
        hist = train(nets, xs.to(DEVICE), ys.to(DEVICE), settings, [0, 1], progress=False)
    assert len(hist) == 2 and all(len(h) == 1 for h in hist)  # b879b52: vmap randomness error


def test_the_record_says_which_speed_settings_took_effect():
    wanted = TrainSettings(bf16=True, channels_last=True, compile=False)
    assert applied(wanted, torch.device("cpu"), 1) == {
        "bf16": False, "channels_last": False, "compile": False}  # fmt: skip
    # a batch of cells: channels-last would be ignored inside vmap, so such cells train alone
    on = applied(wanted, DEVICE, 1)
    assert on["channels_last"] is True and on["bf16"] is autocast_available(DEVICE) is False
    assert applied(wanted, DEVICE, 4)["channels_last"] is False


def test_a_device_tensor_written_to_a_file_is_refused_by_the_standin(tmp_path):
    with standin():
        x = torch.ones(2).to(DEVICE)
        with pytest.raises(DeviceMixError, match="written to a file"):
            pickle.dumps(x)
        from nadpipe.io import save_torch

        save_torch({"x": x}, tmp_path / "x.pt")  # the device rule: back to the CPU first
    assert torch.equal(torch.load(tmp_path / "x.pt", weights_only=True)["x"], torch.ones(2))


def test_the_standin_catches_a_tensor_made_without_a_device():
    from nadpipe.models import relu_units

    net = build(ModelSpec("lenet", {}, Shape(2, 32, 32), 2))
    with standin():
        net = net.to(DEVICE)
        x = torch.randn(4, 2, 32, 32).to(DEVICE)
        with pytest.raises(DeviceMixError, match="CPU tensor of shape"):
            relu_units_820f241(net, tuple(x.shape[1:]))  # torch.zeros(1, *shape): on the CPU
        assert relu_units(net, x) == 6 * 28 * 28 + 16 * 10 * 10 + 120 + 84


@pytest.mark.parametrize("option", ["channels_last", "compile"])
def test_a_model_trained_alone_with_channels_last_or_compile_on_the_standin_equals_the_cpu(option):
    # the per-model settings of the GPU path (bf16 needs autocast, which the stand-in lacks)
    spec = ModelSpec("lenet", {}, Shape(1, 32, 32), 2)
    gen = torch.Generator().manual_seed(0)
    xs, ys = (
        torch.randn(1, 64, 1, 32, 32, generator=gen),
        torch.randint(0, 2, (1, 64), generator=gen),
    )

    def trained(device, **options):
        torch.manual_seed(0)
        net = build(spec)
        settings = TrainSettings(epochs=2, batch_size=16, **options)
        with standin():
            net = net.to(device)
            hist = train([net], xs.to(device), ys.to(device), settings, [0], progress=False)
            weights = {k: v.cpu() for k, v in net.state_dict().items()}
        return hist[0][-1]["loss"], weights, applied(settings, torch.device(device), 1)

    loss, weights, _ = trained("cpu")
    loss_on, weights_on, on = trained(DEVICE, **{option: True})
    assert on[option] is True
    assert loss_on == pytest.approx(loss, rel=1e-5)
    for name, w in weights.items():
        torch.testing.assert_close(weights_on[name], w, atol=1e-5, rtol=1e-4)


def test_nads_of_networks_born_on_the_cpu_equal_the_cpus():
    # what the GPU checks compare (a GPU's generator draws other networks than the CPU's): the
    # CPU's networks moved to the device give the CPU's NADs
    from functools import partial

    from nadpipe.models import build

    shape = Shape(1, 8, 8)
    lenet = partial(build, ModelSpec("mlp", {"hidden": [16]}, shape, 1))
    settings = NadSettings(n_networks=12, networks_per_chunk=4)
    cpu = compute_nads(lenet, settings, shape, "cpu", progress=False)["vectors"]
    with standin():
        moved = compute_nads(lenet, settings, shape, DEVICE, progress=False, born="cpu")
    overlap = float((cpu[:5] @ moved["vectors"][:5].T).square().sum() / 5)
    assert overlap > 0.999 and moved["device"] == "standin"


class _Flags(nn.Module):
    """A single-logit model that notes, at each forward, the switches a GPU honours: TF32
    for matmuls and cuDNN, and float32 matmul precision."""

    seen: list = []

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 1))

    def forward(self, x):
        _Flags.seen.append((torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
                            torch.get_float32_matmul_precision()))  # fmt: skip
        return self.body(x)


def test_the_nad_computation_runs_with_tf32_off(tmp_path, monkeypatch):
    # checking setup() alone passed with TF32 switched on inside the NAD computation: read the
    # switches inside it, at the model's forward, in a NAD job whose backend has tf32 off
    from nadpipe import jobs, models
    from nadpipe.grid import NadJob

    monkeypatch.setattr(models, "build", lambda spec: _Flags())
    job = NadJob("flags", ModelSpec("flags", {}, Shape(1, 4, 4), 1), NadSettings(n_networks=22))
    out = [str(tmp_path / f"n.{ext}") for ext in ("pt", "npy", "json")]
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    _Flags.seen.clear()
    try:
        jobs.nads_job(job, *out, backend=Backend(device="cpu", tf32=False))
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before
    assert len(_Flags.seen) > 22 and set(_Flags.seen) == {(False, False, "highest")}


def test_grouped_auto_groups_the_networks_on_an_accelerator_only(monkeypatch):
    # nads.grouped: auto is one grouped network per chunk on an accelerator (kernel launches
    # bind it there) and one network after another on the CPU; counted where it is built
    from nadpipe import nads

    built = []

    class Counted(nads.Grouped):
        def __init__(self, nets):
            built.append(len(nets))
            super().__init__(nets)

    monkeypatch.setattr(nads, "Grouped", Counted)
    spec = ModelSpec("lenet", {}, Shape(1, 16, 16), 1)
    settings = NadSettings(n_networks=2, networks_per_chunk=2)
    assert settings.grouped == "auto"
    nads.sample_sensitivities(lambda: build(spec), settings, spec.shape, "cpu", progress=False)
    assert built == []
    with standin():
        nads.sample_sensitivities(lambda: build(spec), settings, spec.shape, DEVICE, progress=False)
    assert built == [2]
