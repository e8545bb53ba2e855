import math
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import torch
from torch import nn

from nadpipe.backend import Backend, glibc_version
from nadpipe.models import build, lenet
from nadpipe.nads import (
    NadError,
    batched_sensitivities,
    compute_nads,
    dipole_sensitivity,
    draw_networks,
    eval_points,
    fix_signs,
    gradient_sensitivity,
    nads_from_sensitivities,
    sample_sensitivities,
    split_half,
    subspace_overlap,
)
from nadpipe.settings import ModelSpec, NadSettings, Shape

SHAPE = Shape(1, 32, 32)
# three orthonormal directions and the standard deviations of their random coefficients
U = torch.linalg.qr(torch.randn(1024, 3, generator=torch.Generator().manual_seed(0)))[0].T
SCALES = torch.tensor([3.0, 2.0, 1.0])


class RandomLinear(nn.Module):
    """f(x) = sum_k a_k s_k u_k . x with a ~ N(0, I): the sensitivity is sum_k a_k s_k u_k, so
    its covariance is sum_k s_k^2 u_k u_k^T exactly: NADs u_1, u_2, u_3, eigenvalues 9, 4, 1."""

    def __init__(self):
        super().__init__()
        self.a = nn.Parameter(torch.randn(3))

    def forward(self, x):
        return ((x.flatten(1) @ U.T) * (self.a * SCALES)).sum(1, keepdim=True)


def test_nads_of_a_model_with_known_covariance():
    art = compute_nads(
        RandomLinear, NadSettings("gradient", n_networks=3000), SHAPE, progress=False
    )
    vecs, evals = art["vectors"].double(), art["eigenvalues"]
    for k in range(3):
        assert abs(vecs[k] @ U[k].double()) > 0.99
    # sampling error of a covariance from 3000 draws is a few percent
    torch.testing.assert_close(evals[:3], SCALES.double() ** 2, rtol=0.08, atol=0)
    assert evals[3:].abs().max() < 1e-6  # rank three
    torch.testing.assert_close(
        vecs @ vecs.T, torch.eye(1024, dtype=torch.float64), atol=1e-5, rtol=0
    )
    assert "seconds" not in art  # timings live in the job's log and benchmark, not the artifact


def test_the_dipole_of_a_linear_model_is_its_gradient():
    # a linear model's central difference is exact, whatever the step: the same NADs (the
    # gradient's are checked against the known covariance above)
    dipole, gradient = (
        compute_nads(RandomLinear, NadSettings(e, n_networks=300), SHAPE, progress=False)
        for e in ("dipole", "gradient")
    )
    torch.testing.assert_close(dipole["eigenvalues"], gradient["eigenvalues"], rtol=1e-4, atol=1e-9)
    for k in range(3):
        assert abs(dipole["vectors"][k].double() @ gradient["vectors"][k].double()) > 0.9999
        assert abs(dipole["vectors"][k].double() @ U[k].double()) > 0.99


def test_eigendecomposition_order_and_sign_convention():
    q = torch.linalg.qr(
        torch.randn(1024, 1024, generator=torch.Generator().manual_seed(1)).double()
    )[0]
    s = torch.linspace(2.0, 0.1, 1024, dtype=torch.float64)
    s[0] = 4.0  # a clear gap, so the first direction is identifiable from samples
    g = torch.randn(20000, 1024, generator=torch.Generator().manual_seed(2)).double() * s @ q.T
    evals, vecs = nads_from_sensitivities(g)
    assert torch.all(evals[:-1] >= evals[1:])
    assert abs(vecs[0] @ q[:, 0]) > 0.95
    # largest-magnitude coordinate of each NAD is positive, so NADs are comparable across runs
    assert torch.all(vecs.gather(1, vecs.abs().argmax(1, keepdim=True)) > 0)
    assert torch.equal(fix_signs(-vecs), vecs)


@pytest.mark.parametrize("shape", [Shape(1, 8, 8), Shape(3, 16, 16)])
def test_top_k_from_the_gram_matrix_equals_the_full_eigendecomposition(shape):
    # fewer samples than coordinates: the first k NADs without the d x d covariance
    scales = torch.linspace(3.0, 0.1, 40, dtype=torch.float64)
    basis = torch.linalg.qr(
        torch.randn(shape.d, 40, generator=torch.Generator().manual_seed(3)).double()
    )[0]
    g = (
        torch.randn(40, 40, generator=torch.Generator().manual_seed(4)).double() * scales
    ) @ basis.T
    full_e, full_v = nads_from_sensitivities(g)
    top_e, top_v = nads_from_sensitivities(g, top_k=12)
    assert top_v.shape == (12, shape.d)
    torch.testing.assert_close(top_e, full_e[:12], rtol=1e-9, atol=1e-12)
    for k in range(12):  # the same vectors, signs by the same convention
        torch.testing.assert_close(top_v[k], full_v[k], atol=1e-8, rtol=0)
    with pytest.raises(NadError, match="rank at most 39"):
        nads_from_sensitivities(g, top_k=40)


def test_large_inputs_need_top_k():
    with pytest.raises(NadError, match=r"12288 input coordinates.*set nads.top_k"):
        nads_from_sensitivities(torch.zeros(3, 12288))


def test_dipole_is_a_central_difference_and_tends_to_the_gradient():
    settings = NadSettings(n_networks=1, n_points=2)
    (net,) = draw_networks(lambda: lenet(1, 1).double(), settings, range(1))
    x0 = eval_points(settings, SHAPE).double()
    grad = gradient_sensitivity(net, x0)
    small = dipole_sensitivity(net, x0, step=1e-4, batch_size=512)
    torch.testing.assert_close(small, grad, rtol=1e-3, atol=1e-7)
    # coordinate k of the large-step dipole is exactly (f(x0 + h e_k) - f(x0 - h e_k)) / 2h
    big = dipole_sensitivity(net, x0, step=100.0, batch_size=300)
    e = torch.zeros(1, 1, 32, 32, dtype=torch.float64)
    e.view(-1)[77] = 100.0
    with torch.no_grad():
        by_hand = (net(x0[:1] + e) - net(x0[:1] - e)).item() / 200
    assert big[0, 77].item() == pytest.approx(by_hand, rel=1e-9)
    # the large step measures something else than the gradient (why the estimators differ)
    assert torch.nn.functional.cosine_similarity(big, grad).max() < 0.99


def test_nads_are_deterministic_and_seeded():
    build = lambda: lenet(1, 1)  # noqa: E731
    a = compute_nads(build, NadSettings(n_networks=4, seed=1), SHAPE, progress=False)
    b = compute_nads(build, NadSettings(n_networks=4, seed=1), SHAPE, progress=False)
    c = compute_nads(build, NadSettings(n_networks=4, seed=2), SHAPE, progress=False)
    assert torch.equal(a["vectors"], b["vectors"])
    assert not torch.equal(a["vectors"], c["vectors"])
    assert a["settings"]["n_networks"] == 4 and a["settings"]["estimator"] == "dipole"


def test_lenet_dipole_nads_prefer_low_frequencies():
    # the NAD paper's finding: LeNet's first NADs are low-frequency; its last ones are not
    art = compute_nads(lambda: lenet(1, 1), NadSettings(n_networks=64), SHAPE, progress=False)
    power = torch.fft.fft2(art["vectors"].reshape(1024, 32, 32)).abs() ** 2
    f = torch.fft.fftfreq(32).abs()
    radius = (f[:, None] ** 2 + f[None, :] ** 2).sqrt()
    mean_freq = (power * radius).sum((1, 2)) / power.sum((1, 2))  # (1024,)
    assert mean_freq[:10].mean() < mean_freq[-100:].mean()


def test_subspace_overlap_is_one_for_the_same_subspace_and_k_over_d_for_random_ones():
    q = torch.linalg.qr(torch.randn(1024, 1024, generator=torch.Generator().manual_seed(7)))[0].T
    r = torch.linalg.qr(torch.randn(1024, 1024, generator=torch.Generator().manual_seed(8)))[0].T
    mixed = torch.cat([q[:10][torch.randperm(10)], q[10:]])  # same top-10 subspace, other order
    assert subspace_overlap(q, mixed, 10) == pytest.approx(1.0)
    assert subspace_overlap(q, r, 100) == pytest.approx(100 / 1024, rel=0.3)


def test_split_half_agreement_is_stored_with_the_nads():
    art = compute_nads(RandomLinear, NadSettings(n_networks=400, n_points=2), SHAPE, progress=False)
    sh = art["split_half"]
    assert sh["halves"] == [200, 200] and sh["ranks"] == [399, 399]
    assert sh["overlap"][1] > 0.95  # the top direction (scale 3) is clear in either half
    assert 0 < sh["eigenvalue_rel_diff_top10"] < 0.1  # eigenvalues 9, 4, 1: a few percent apart
    assert sh["undefined"] == {}


def test_split_half_says_nothing_where_a_half_has_too_low_a_rank():
    # 2 networks: halves of one network have rank 0; every overlap would read 1.0 otherwise
    g = torch.randn(2, 1024, generator=torch.Generator().manual_seed(0)).double()
    sh = split_half(g, 1)
    assert all(math.isnan(v) for v in sh["overlap"].values())
    assert "rank 0 < 1" in sh["undefined"][1] and math.isnan(sh["eigenvalue_rel_diff_top10"])
    # 22 networks: halves of 11 have rank 10: k = 1 and 10 defined, 50 and 100 not
    g = torch.randn(22, 1024, generator=torch.Generator().manual_seed(1)).double()
    sh = split_half(g, 1)
    assert math.isfinite(sh["overlap"][10]) and math.isnan(sh["overlap"][50])
    assert set(sh["undefined"]) == {50, 100} and "rank 10 < 50" in sh["undefined"][50]


class Overflows(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.full((1,), 1e30))

    def forward(self, x):
        return (x.flatten(1) * self.w).pow(2).sum(1, keepdim=True)  # inf at x0 +- 100 e_k


def test_non_finite_sensitivities_fail_the_nad_job():
    with pytest.raises(NadError, match=r"sensitivities of 3 of 3 random networks are not finite"):
        compute_nads(Overflows, NadSettings(n_networks=3), SHAPE, progress=False)


def xavier():
    net = lenet(1, 1)
    for m in net.modules():
        if isinstance(m, nn.Conv2d | nn.Linear):
            nn.init.xavier_normal_(m.weight)
    return net


@pytest.mark.parametrize("build", [lambda: lenet(1, 1), xavier], ids=["default", "xavier"])
def test_every_path_draws_the_same_real_networks(build):
    settings = NadSettings("gradient", n_networks=5)
    x0 = eval_points(settings, SHAPE)
    nets = draw_networks(build, settings, range(5))
    again = draw_networks(build, settings, range(2, 5))  # a chunk elsewhere: the same networks
    for a, b in zip(nets[2:], again, strict=True):
        assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    for estimator in ("gradient", "dipole"):
        batched = batched_sensitivities(nets, x0, estimator, 100.0, 512)  # torch.func, stacked
        for k, net in enumerate(nets):
            one = (
                gradient_sensitivity(net, x0)
                if estimator == "gradient"
                else dipole_sensitivity(net, x0, 100.0, 512)
            )
            torch.testing.assert_close(
                batched[k], one, rtol=1e-4, atol=1e-5 * one.abs().max().item()
            )
    # the chunk size changes nothing, and a custom initialisation is the one used
    a = sample_sensitivities(
        build, NadSettings("gradient", n_networks=7, networks_per_chunk=3), SHAPE, progress=False
    )
    b = sample_sensitivities(
        build, NadSettings("gradient", n_networks=7, networks_per_chunk=7), SHAPE, progress=False
    )
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6 * b.abs().max().item())
    torch.testing.assert_close(a[0], gradient_sensitivity(nets[0], x0)[0], rtol=1e-4, atol=1e-6)


def test_colour_nads():
    shape = Shape(3, 16, 16)
    art = compute_nads(
        lambda: lenet(3, 1, (16, 16)), NadSettings("gradient", n_networks=30), shape, progress=False
    )
    assert art["vectors"].shape == (768, 768) and art["shape"] == [3, 16, 16]
    # a colour network sees all three channels: its first NAD is not confined to one
    energy = art["vectors"][0].reshape(3, -1).pow(2).sum(1)
    assert (energy > 0.05).all()


@pytest.mark.parametrize(
    ("model", "n", "windowed", "side"),
    [("lenet", 110, True, 32), ("lenet", 16, False, 16), ("resnet18", 2, True, 16)],
)
def test_networks_together_give_the_nads_of_networks_one_after_another(model, n, windowed, side):
    # the dipole of a chunk of networks in one call (vmap over their stacked parameters, the
    # default on a GPU) against one network after another, on the same networks (LeNet windowed
    # at 32 x 32, where both its convolutions are; its plain dipole at any size)
    spec = ModelSpec(model, {}, Shape(1, side, side), 1)
    settings = NadSettings(n_networks=n, networks_per_chunk=8, windowed=windowed)
    build_net = partial(build, spec)
    one = sample_sensitivities(build_net, settings, spec.shape, "cpu", False, together=False)
    all_ = sample_sensitivities(build_net, settings, spec.shape, "cpu", False, together=True)
    assert ((one - all_).abs().max() / one.abs().max()).item() < 1e-5  # float rounding
    if n > 100:
        a, b = nads_from_sensitivities(one)[1], nads_from_sensitivities(all_)[1]
        for k in (1, 10, 100):
            assert subspace_overlap(a, b, k) > 0.999, k
        sa, sb = split_half(one, 1), split_half(all_, 1)
        assert sa["undefined"] == sb["undefined"]  # k = 100: undefined in both (rank 54)
        for k in sa["overlap"]:
            assert sa["overlap"][k] == pytest.approx(sb["overlap"][k], abs=1e-4, nan_ok=True), k


KILLED = """
import sys
from functools import partial
from pathlib import Path
from nadpipe.models import build
from nadpipe.nads import sample_sensitivities
from nadpipe.settings import ModelSpec, NadSettings, Shape
spec = ModelSpec("lenet", {}, Shape(1, 32, 32), 1)
sample_sensitivities(partial(build, spec), NadSettings(n_networks=24, networks_per_chunk=2),
                     spec.shape, progress=False, kept=sys.argv[1])
"""


def test_a_stopped_nad_computation_keeps_its_chunks_and_its_rerun_computes_only_the_rest(
    tmp_path,
):
    import signal
    import subprocess
    import sys
    import time

    kept = tmp_path / "chunks"
    proc = subprocess.Popen([sys.executable, "-c", KILLED, str(kept)])
    deadline = time.time() + 120
    while len(list(kept.glob("*.pt"))) < 3 and time.time() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)  # half way, without a word
    proc.wait()
    before = {p.name: p.stat().st_mtime_ns for p in kept.glob("*.pt")}
    assert 3 <= len(before) < 12, before  # 12 chunks of 2 networks
    spec = ModelSpec("lenet", {}, Shape(1, 32, 32), 1)
    settings = NadSettings(n_networks=24, networks_per_chunk=2)
    again = sample_sensitivities(partial(build, spec), settings, spec.shape, progress=False,
                                 kept=str(kept))  # fmt: skip
    after = {p.name: p.stat().st_mtime_ns for p in kept.glob("*.pt")}
    assert {k: after[k] for k in before} == before and len(after) == 12  # only the rest
    whole = sample_sensitivities(partial(build, spec), settings, spec.shape, progress=False)
    assert torch.equal(again, whole)  # bit for bit


def test_a_split_half_curve_forecasts_the_networks_a_target_needs():
    from nadpipe.convergence import forecast, verdict

    # overlap n / (n + 800): logit(overlap) = log(n / 800), a line in log n through 0.5 at 800
    curve = {str(n): n / (n + 800) for n in (100, 200, 400)}
    assert forecast({"curve": curve}, 0.5) == 800 and forecast({"curve": curve}, 0.8) == 3200
    assert forecast({"curve": {"100": 0.3, "200": 0.3}}, 0.5) is None  # no rise: no forecast
    assert forecast({"curve": {"100": 0.2}}, 0.5) == 400  # one point: the curve through it
    assert forecast({"curve": {"100": float("nan")}}, 0.5) is None
    art = {"split_half": {"overlap": {"10": 1 / 3}, "undefined": {}, "curve": curve,
                          "halves": [200, 200]},
           "isotropy": {"anisotropy": 9.0, "samples": 400, "d": 1024},
           "seconds_per_network": 0.05}  # fmt: skip
    kind, text = verdict(art, 0.5, "raise nads.n_networks (now 400)")
    assert kind == "not converged" and text.endswith(
        "raise nads.n_networks (now 400); its split-half curve (0.11 at 100, 0.20 at 200, 0.33 "
        "at 400) reaches 0.5 near 800 networks, about 40 s here"
    ), text


def test_the_split_half_curve_is_measured_on_the_first_networks():
    art = compute_nads(RandomLinear, NadSettings(n_networks=400, n_points=2), SHAPE, progress=False)
    curve = art["split_half"]["curve"]
    assert sorted(curve) == [50, 100, 200, 400] and curve[400] == art["split_half"]["overlap"][10]
    g = torch.randn(40, 1024, generator=torch.Generator().manual_seed(1)).double()
    assert sorted(split_half(g, 1)["curve"]) == [40]  # halves of 10 networks: rank 9 < 10


def test_a_jobs_tensors_reuse_the_memory_they_free():
    # a NAD chunk's probe buffers are freed and made again every chunk; with glibc's defaults
    # many went back to the system and were faulted in again page by page (nadpipe.backend.
    # keep_freed_memory, called by every job's setup; page faults vary with the kernel's huge
    # pages, so what is counted is where glibc put 20 MiB and what it kept after the free)
    code = """
import ctypes, sys, torch
from nadpipe.backend import keep_freed_memory
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
if sys.argv[1] == "kept":
    keep_freed_memory()
before = libc.mallinfo2()
x = torch.ones(5 << 20)
mapped = libc.mallinfo2().hblkhd - before.hblkhd
del x
print(mapped >> 20, (libc.mallinfo2().fordblks - before.fordblks) >> 20)
"""
    if (glibc_version() or (0,)) < (2, 33):
        pytest.skip("glibc's malloc only, counted by its mallinfo2 (glibc 2.33)")
    said = {
        way: subprocess.run(
            [sys.executable, "-c", code, way], capture_output=True, text=True, check=True
        ).stdout.split()
        for way in ("default", "kept")
    }
    # glibc's default: 20 MiB mapped apart and given back when freed; kept: from the heap,
    # and still there for the next chunk
    assert int(said["default"][0]) >= 20 and int(said["default"][1]) < 20, said
    assert int(said["kept"][0]) == 0 and int(said["kept"][1]) >= 20, said


def _damage(way: str, chunk, kept, other) -> None:
    """Damage the kept chunk `chunk` (networks 2-3) one of six ways; `other`: the kept chunks
    of another run (seed 1)."""
    from nadpipe.io import save_claimed

    claim = {"job": kept.name, "first": 2, "stop": 4}
    if way == "another range":
        chunk.write_bytes((kept / "4-6.pt").read_bytes())
    elif way == "another run":
        chunk.write_bytes((other / "2-4.pt").read_bytes())
    elif way == "truncated":
        chunk.write_bytes(chunk.read_bytes()[:100])
    elif way == "garbage":
        chunk.write_bytes(b"\x00not a chunk" * 50)
    elif way == "wrong shape":
        save_claimed(torch.zeros(3, 256, dtype=torch.float64), claim, chunk)
    elif way == "nan":
        save_claimed(torch.full((2, 256), float("nan"), dtype=torch.float64), claim, chunk)


@pytest.mark.parametrize(
    "way", ["another range", "another run", "truncated", "garbage", "wrong shape", "nan"]
)
def test_a_damaged_kept_chunk_is_named_dropped_and_computed_again(way, tmp_path, caplog):
    # a killed NAD job's rerun reads back the chunks it kept: 10c1e0f took another range's or
    # another run's chunk as its own (NADs that differ from an uninterrupted run's, exit 0) and
    # failed on the others with torch's words, naming no file
    from dataclasses import replace

    from nadpipe.grid import NadJob
    from nadpipe.jobs import _chunks, nads_job
    from nadpipe.nads import sample_sensitivities

    shape = Shape(1, 16, 16)
    spec = ModelSpec("lenet", {}, shape, 1)
    job = NadJob("lenet", spec, NadSettings(n_networks=24, networks_per_chunk=2))
    backend = Backend(device="cpu")

    def run(root):
        out = [str(root / f"nads/lenet.{ext}") for ext in ("pt", "npy", "json")]
        (root / "nads").mkdir(parents=True, exist_ok=True)
        nads_job(job, *out, backend=backend)
        return Path(out[1]).read_bytes()

    whole = run(tmp_path / "whole")
    root = tmp_path / "stopped"
    kept = Path(_chunks(str(root), "lenet", job, torch.device("cpu")))
    other = tmp_path / "other"
    for folder, settings in ((kept, job.settings), (other, replace(job.settings, seed=1))):
        sample_sensitivities(partial(build, spec), settings, shape, progress=False,
                             kept=str(folder))  # fmt: skip
    _damage(way, kept / "2-4.pt", kept, other)
    caplog.set_level("INFO", logger="nadpipe")
    assert run(root) == whole  # byte for byte
    said = [r.getMessage() for r in caplog.records if "was dropped" in r.getMessage()]
    assert len(said) == 1 and str(kept / "2-4.pt") in said[0], caplog.text
