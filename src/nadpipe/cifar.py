"""CIFAR-10 through torchvision, and the data of the three CIFAR studies.

- `cifar_nad` (underspecification paper, Sec. 4): binary CIFAR-10 (classes 0-4 -> label -1,
  5-9 -> +1) with a fourth channel drawn from D(v), v = a NAD, with the same label.
- `poison` (NAD paper): 10-class CIFAR-10 whose training images carry a class code along NADs
  i and i+1 (see `carrier`); the test set is clean.
- `flip` (NAD paper): every image channel written in the NAD basis with the order of the
  coefficients reversed (see `flip_matrix`).

Images are read by `torchvision.datasets.CIFAR10`, scaled to [0, 1] and, when configured,
normalised per channel. Everything random is drawn on the CPU from seeded generators, so a job
that rebuilds a study's data gets the same bytes as the job before it.
"""

from __future__ import annotations

import functools
import os
import pickle

import numpy as np
import torch

from .cifar_files import BASE_FOLDER, CLASSES, TRAIN_FILES, missing_message
from .data import sample_dv
from .io import atomic_write, generator
from .settings import CifarData


def _unverified_cifar10():
    """torchvision's CIFAR10 without the md5 checks of the official files (for a directory in
    CIFAR-10 format holding other images, e.g. a subset or the tests' generated one).
    torchvision only checks that a file exists when its md5 is None."""
    # deferred: it loads torchvision, which importing cifar does not
    from torchvision.datasets import CIFAR10

    class UnverifiedCIFAR10(CIFAR10):
        train_list = [[name, None] for name, _ in CIFAR10.train_list]
        test_list = [[name, None] for name, _ in CIFAR10.test_list]
        meta = {**CIFAR10.meta, "md5": None}

    return UnverifiedCIFAR10


def download_cifar10(root: str) -> None:
    """Download and extract CIFAR-10 into `root` (torchvision; needs internet)."""
    # deferred: it loads torchvision, which importing cifar does not
    from torchvision.datasets import CIFAR10

    CIFAR10(root, train=True, download=True)


def load_cifar10(
    root: str, train: bool, verify_md5: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """(images (n, 3, 32, 32) uint8, labels (n,) int64) of one split, through torchvision."""
    # deferred: it loads torchvision, which importing cifar does not
    from torchvision.datasets import CIFAR10

    cls = CIFAR10 if verify_md5 else _unverified_cifar10()
    try:
        ds = cls(root, train=train, download=False)
    except RuntimeError as e:  # torchvision: "Dataset not found or corrupted ..."
        hint = " (set cifar10.verify_md5: false for a directory other than the official files)"
        raise FileNotFoundError(f"{missing_message(root)} torchvision said: {e}{hint}") from e
    x = torch.from_numpy(np.ascontiguousarray(ds.data)).permute(0, 3, 1, 2).contiguous()
    return x, torch.tensor(ds.targets, dtype=torch.long)


@functools.cache
def load_splits(s: CifarData) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """{"train": (x, y), "test": (x, y)}: x (n, 3, 32, 32) float32 in [0, 1], y (n,) classes."""
    out = {}
    for split, n in (("train", s.n_train), ("test", s.n_test)):
        x, y = load_cifar10(s.root, split == "train", s.verify_md5)
        if n is not None:
            if n > len(x):
                raise ValueError(f"cifar10.n_{split} = {n} but {s.root} holds {len(x)} images")
            x, y = x[:n], y[:n]
        out[split] = (x.float() / 255, y)
    return out


def normalise(x: torch.Tensor, s: CifarData) -> torch.Tensor:
    """Per-channel (x - mean) / std of images in [0, 1]; unchanged when mean is None."""
    if s.mean is None:
        return x
    mean = torch.tensor(s.mean, dtype=x.dtype)[None, :, None, None]
    std = torch.tensor(s.std, dtype=x.dtype)[None, :, None, None]
    return (x - mean) / std


# -- cifar_nad ------------------------------------------------------------------------------


def binary_labels(classes: torch.Tensor) -> torch.Tensor:
    """0 (label -1) for classes 0-4, 1 (label +1) for classes 5-9."""
    return (classes >= 5).long()


def with_synthetic(
    x: torch.Tensor, y01: torch.Tensor, v: torch.Tensor, eps: float, sigma: float, seed: object
) -> torch.Tensor:
    """x (n, 3, 32, 32) with channels drawn from D(v) appended (v shaped (C, 32, 32): C more
    channels) with the labels 2 * y01 - 1; `seed` (any printable value) seeds the draw."""
    gen = generator("cifar-nad-channel", seed)
    synthetic = sample_dv(v, y01.double() * 2 - 1, eps, sigma, gen)
    return torch.cat([x, synthetic.reshape(len(x), *v.shape)], dim=1)


# -- poison ---------------------------------------------------------------------------------


def carrier(c: int) -> tuple[int, int, int]:
    """(NAD offset, colour channel, sign) of class c's carrier: NAD i + c % 2, channel
    (c // 2) % 3, sign + for c < 6 and - otherwise. The ten classes get ten distinct carriers:
    0 -> (i, R, +), 1 -> (i+1, R, +), 2 -> (i, G, +), ..., 5 -> (i+1, B, +), 6 -> (i, R, -),
    7 -> (i+1, R, -), 8 -> (i, G, -), 9 -> (i+1, G, -)."""
    return c % 2, (c // 2) % 3, 1 if c < 6 else -1


def poison(x01: torch.Tensor, classes: torch.Tensor, vectors: torch.Tensor, i: int, eps: float):
    """Poisoned copies of images `x01` (n, 3, 32, 32) in [0, 1] pixel units.

    In each colour channel the coefficients along NAD i and NAD i+1 are removed, and the
    image's own carrier coefficient is set to sign * eps: the six carrier coefficients are then
    a code of the class (zero but one entry), which separates the training set linearly by
    itself. Pixels may leave [0, 1] by at most eps.
    """
    u = vectors[[i, i + 1]].double()  # (2, 1024), orthonormal
    flat = x01.double().reshape(len(x01), 3, 1024)
    flat = flat - (flat @ u.T) @ u  # remove both coefficients in every channel
    for c in range(10):
        offset, channel, sign = carrier(c)
        rows = classes == c
        flat[rows, channel] += sign * eps * u[offset]
    return flat.reshape(x01.shape).to(x01.dtype)


# -- flip -----------------------------------------------------------------------------------


def flip_matrix(vectors: torch.Tensor) -> torch.Tensor:
    """M = U P U^T: the coefficient along NAD k moves to NAD d-1-k (U: NADs as columns, P the
    reversal). M is orthogonal and symmetric, and flipping twice is the identity."""
    u = vectors.double().T  # (d, d), columns are NADs
    return u.flip(1) @ u.T


def flip_images(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """x (n, C, H, W) mapped by the flip matrix `m`: each channel alone for 1-channel NADs
    (m of size H * W), the whole image for colour NADs (m of size C * H * W)."""
    per_channel = m.shape[0] == x.shape[2] * x.shape[3]
    flat = x.double().reshape(*x.shape[:2], -1) if per_channel else x.double().flatten(1)
    return (flat @ m.T).reshape(x.shape).to(x.dtype)


# -- a small CIFAR-10-format directory --------------------------------------------------------


def write_cifar10_like(root: str, n_train: int = 500, n_test: int = 200, seed: int = 0) -> str:
    """Write `n_train` + `n_test` random 32x32 colour images in CIFAR-10's python format under
    `root` (for tests and dry runs without the real data; read it with verify_md5 false).

    Each class has its own mean colour, so the classes (and the binary task) can be learned.
    """
    rng = np.random.default_rng(seed)
    tint = rng.uniform(60, 196, size=(10, 3))
    folder = os.path.join(root, BASE_FOLDER)
    os.makedirs(folder, exist_ok=True)

    def batch(n: int, name: str) -> dict:
        labels = rng.integers(0, 10, size=n)
        img = tint[labels][:, :, None] + rng.normal(0, 40, size=(n, 3, 1024))
        data = np.clip(img, 0, 255).astype(np.uint8).reshape(n, 3 * 1024)
        return {"batch_label": name, "labels": labels.tolist(), "data": data}

    per = [n_train // 5 + (k < n_train % 5) for k in range(5)]
    content = {name: batch(n, name) for name, n in zip(TRAIN_FILES, per, strict=True)}
    content["test_batch"] = batch(n_test, "test_batch")
    content["batches.meta"] = {"label_names": list(CLASSES), "num_vis": 3 * 1024}
    for name, obj in content.items():

        def write(tmp: str, obj: dict = obj) -> None:
            with open(tmp, "wb") as f:
                pickle.dump(obj, f)

        atomic_write(os.path.join(folder, name), write)
    return folder
