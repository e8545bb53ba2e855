"""NAD bases in and out: the file reader's good and bad inputs, and comparing two bases."""

import numpy as np
import pytest
import torch
import yaml
from conftest import REPO, SCHEMA

from nadpipe import config as nc
from nadpipe.bases import BasisError, compare, read_basis, subspace_overlap
from nadpipe.grid import Plan

Q = np.linalg.qr(np.random.default_rng(0).standard_normal((64, 64)))[0].T  # rows orthonormal


@pytest.mark.parametrize(
    ("name", "save"),
    [
        ("b.npy", lambda p: np.save(p, Q.astype(np.float32))),
        ("b.npz", lambda p: np.savez(p, Q)),  # one array, any name
        ("named.npz", lambda p: np.savez(p, eigenvalues=np.ones(64), nads=Q)),
        ("t.pt", lambda p: torch.save(torch.from_numpy(Q), p)),
        ("art.pt", lambda p: torch.save({"vectors": torch.from_numpy(Q).float()}, p)),
        ("img.npy", lambda p: np.save(p, Q.reshape(64, 1, 8, 8))),  # (k, C, H, W): flattened
    ],
)
def test_good_basis_files_are_read_as_rows(tmp_path, name, save):
    path = tmp_path / name
    save(path)
    v = read_basis(path, d=64)
    assert v.shape == (64, 64) and np.abs(v - Q).max() < 1e-6


@pytest.mark.parametrize(
    ("name", "save", "message"),
    [
        ("missing.npy", None, r"no file"),
        ("b.txt", lambda p: p.write_text("1 2"), r"unknown extension '.txt'"),
        ("bad.npy", lambda p: p.write_bytes(b"\x93NUMPY garbage"), r"cannot be read"),
        (
            "cols.npy",
            lambda p: np.save(p, Q[:10].T),
            r"rows of 10 coordinates.*are the NADs its columns",
        ),
        (
            "scaled.npy",
            lambda p: np.save(p, 2 * Q),
            r"not orthonormal \(largest \|V V\^T - I\| entry 3",
        ),
        ("nan.npy", lambda p: np.save(p, np.where(np.eye(64) > 0, np.nan, Q)), r"64 non-finite"),
        (
            "d.npy",
            lambda p: np.save(p, Q[:, :32]),
            r"rows of 32 coordinates, but the inputs have 64",
        ),
        ("many.npz", lambda p: np.savez(p, a=Q, b=Q), r"holds arrays \['a', 'b'\]"),
        ("tall.npy", lambda p: np.save(p, np.ones((70, 64))), r"70 rows of 64: not a basis"),
    ],
)
def test_bad_basis_files_are_refused_naming_the_key(tmp_path, name, save, message):
    path = tmp_path / name
    if save:
        save(path)
    with pytest.raises(BasisError, match=rf"config key 'architectures.x.nads_file': .*{message}"):
        read_basis(path, d=64, key="architectures.x.nads_file")


def test_a_basis_file_serves_the_studies_and_a_bad_one_stops_the_config(tmp_path):
    basis = np.linalg.qr(np.random.default_rng(1).standard_normal((1024, 1024)))[0].T
    np.save(tmp_path / "mine.npy", basis[:300])  # the first 300 NADs only
    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    cfg["architectures"]["lenet"] = {"nads_file": str(tmp_path / "mine.npy")}
    cfg["nad_pairs"]["indices"] = [0, 299]
    loaded, warnings = nc.load_config(cfg, SCHEMA)
    assert Plan(loaded).nad_job("lenet").file == str(tmp_path / "mine.npy")
    assert not [w for w in warnings if "lenet" in w]  # a file has no covariance rank to warn of
    cfg["nad_pairs"]["indices"] = [0, 300]
    with pytest.raises(
        nc.ConfigError, match=r"nad_pairs.indices.1.*300 is greater than the maximum of 299"
    ):
        nc.load_config(cfg, SCHEMA)
    np.save(tmp_path / "mine.npy", basis[:300].T)  # columns, not rows
    with pytest.raises(
        nc.ConfigError, match=r"'architectures.lenet.nads_file': .*are the NADs its columns"
    ):
        nc.load_config(cfg, SCHEMA)
    cfg["architectures"]["lenet"]["nads"] = {"n_networks": 64}
    with pytest.raises(nc.ConfigError, match=r"'architectures.lenet.nads': .*nads_file.*ignored"):
        nc.load_config(cfg, SCHEMA)


def test_compare_two_bases():
    same = compare(Q, Q)
    assert all(v == pytest.approx(1.0) for v in same["overlap"].values())
    assert np.allclose(same["cosine"], 1.0)
    flipped = compare(Q, Q[::-1])  # the first NADs of one are the last of the other
    assert flipped["overlap"][10] == pytest.approx(0.0, abs=1e-12)
    assert flipped["random"][10] == pytest.approx(10 / 64)
    assert subspace_overlap(Q, -Q, 5) == pytest.approx(1.0)  # signs do not matter
    with pytest.raises(BasisError, match="rows of 64 and 8"):
        compare(Q, np.eye(8))
