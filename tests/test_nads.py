import pytest
import torch
from torch import nn

from nadpipe.models import lenet
from nadpipe.nads import (
    NadSettings,
    compute_nads,
    dipole_sensitivity,
    eval_points,
    fix_signs,
    gradient_sensitivity,
    init_network,
    nads_from_sensitivities,
    subspace_overlap,
)

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


@pytest.mark.parametrize("estimator", ["dipole", "gradient"])
def test_nads_of_a_model_with_known_covariance(estimator):
    art = compute_nads(
        RandomLinear, NadSettings(estimator=estimator, n_networks=3000), progress=False
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


def test_dipole_is_a_central_difference_and_tends_to_the_gradient():
    settings = NadSettings(n_networks=1, n_points=2)
    net = init_network(lambda: lenet(1, 1).double(), settings, 0)
    x0 = eval_points(settings).double()
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
    a = compute_nads(build, NadSettings(n_networks=4, seed=1), progress=False)
    b = compute_nads(build, NadSettings(n_networks=4, seed=1), progress=False)
    c = compute_nads(build, NadSettings(n_networks=4, seed=2), progress=False)
    assert torch.equal(a["vectors"], b["vectors"])
    assert not torch.equal(a["vectors"], c["vectors"])
    assert a["settings"]["n_networks"] == 4 and a["settings"]["estimator"] == "dipole"


def test_lenet_dipole_nads_prefer_low_frequencies():
    # the NAD paper's finding: LeNet's first NADs are low-frequency; its last ones are not
    art = compute_nads(lambda: lenet(1, 1), NadSettings(n_networks=64), progress=False)
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
    assert subspace_overlap(q, mixed, 1) < 1.0 or torch.equal(mixed[0], q[0])
    assert subspace_overlap(q, r, 100) == pytest.approx(100 / 1024, rel=0.3)


def test_split_half_agreement_is_stored_with_the_nads():
    art = compute_nads(RandomLinear, NadSettings(n_networks=400, n_points=2), progress=False)
    sh = art["split_half"]
    assert sh["halves"] == [200, 200]
    assert sh["overlap"][1] > 0.95  # the top direction (scale 3) is clear in either half
    # eigenvalues 9, 4, 1 from 200 networks each: a few percent of the top one apart
    assert 0 < sh["eigenvalue_rel_diff_top10"] < 0.1


def ks_distance(a: torch.Tensor, b: torch.Tensor) -> float:
    """Two-sample Kolmogorov-Smirnov statistic."""
    a, b = a.flatten().sort().values, b.flatten().sort().values
    grid = torch.cat([a, b])
    fa = torch.searchsorted(a, grid, right=True) / len(a)
    fb = torch.searchsorted(b, grid, right=True) / len(b)
    return (fa - fb).abs().max().item()


def test_stacked_init_draws_as_pytorch_initialises_the_real_modules():
    from nadpipe.models import resnet18
    from nadpipe.nads import stacked_init

    template = lenet(1, 1)
    stacked = stacked_init(template, list(range(40)))
    real = []
    for seed in range(40):
        torch.manual_seed(1000 + seed)
        real.append(dict(lenet(1, 1).named_parameters()))
    for name, p in template.named_parameters():
        assert stacked[name].shape == (40, *p.shape)
        pooled = torch.stack([r[name].detach() for r in real])
        assert stacked[name].abs().max() <= pooled.abs().max() * 1.01 + 1e-6  # same bound
        # same distribution: the KS distance within its 0.1 % critical value
        n, m = stacked[name].numel(), pooled.numel()
        assert ks_distance(stacked[name], pooled) < 1.95 * ((n + m) / (n * m)) ** 0.5, name
    # BatchNorm at init: weight 1, bias 0; every parameter of ResNet-18 is covered
    net = resnet18(1, 1)
    res = stacked_init(net, [0, 1])
    assert set(res) == {n for n, _ in net.named_parameters()}
    norms = [n for n, m in net.named_modules() if isinstance(m, nn.BatchNorm2d)]
    assert norms and all(torch.all(res[f"{n}.weight"] == 1) for n in norms)
    assert all(torch.all(res[f"{n}.bias"] == 0) for n in norms)


def test_batched_estimators_equal_the_real_modules_they_describe():
    from nadpipe.nads import batched_sensitivities, stacked_init

    template = lenet(1, 1).eval()
    params = stacked_init(template, [5, 6, 7])
    x0 = torch.randn(2, 1, 32, 32, generator=torch.Generator().manual_seed(1))
    for estimator in ("gradient", "dipole"):
        batched = batched_sensitivities(template, params, x0, estimator, 100.0, 512)
        for k in range(3):
            net = lenet(1, 1).eval()
            net.load_state_dict({n: v[k] for n, v in params.items()})
            if estimator == "gradient":
                one = gradient_sensitivity(net, x0)
            else:
                one = dipole_sensitivity(net, x0, 100.0, 512)
            assert torch.allclose(batched[k], one, rtol=1e-4, atol=1e-5 * one.abs().max())


def test_networks_do_not_depend_on_the_chunking_and_custom_inits_fall_back():
    from nadpipe.nads import sample_sensitivities, uses_default_init

    def build():
        return lenet(1, 1)

    from nadpipe.nads import stacked_init

    a = sample_sensitivities(build, NadSettings("gradient", n_networks=7, networks_per_chunk=3))
    b = sample_sensitivities(build, NadSettings("gradient", n_networks=7, networks_per_chunk=7))
    assert torch.allclose(a, b, rtol=1e-5, atol=1e-6 * b.abs().max())  # batch-size rounding only
    whole, part = stacked_init(build(), [11, 12, 13]), stacked_init(build(), [12, 13])
    assert all(torch.equal(whole[k][1:], part[k]) for k in whole)  # the same networks
    assert uses_default_init(build, 0)

    def xavier():
        net = lenet(1, 1)
        for m in net.modules():
            if isinstance(m, nn.Conv2d | nn.Linear):
                nn.init.xavier_normal_(m.weight)
        return net

    assert not uses_default_init(xavier, 0)  # its own init: real modules, one at a time
    c = sample_sensitivities(xavier, NadSettings("gradient", n_networks=3), progress=False)
    assert c.shape == (3, 1024) and torch.isfinite(c).all()
