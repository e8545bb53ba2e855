"""Where CIFAR-10's files lie, as torchvision reads them: what the config check, the plan and
`nadpipe doctor` need of the data set, without importing torch (nadpipe.cifar reads the files).
"""

from __future__ import annotations

import os

BASE_FOLDER = "cifar-10-batches-py"
TRAIN_FILES = [f"data_batch_{k}" for k in range(1, 6)]
FILES = [*TRAIN_FILES, "test_batch", "batches.meta"]
URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CLASSES = (
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
)


def cifar_files(root: str) -> list[str]:
    """The files of the python version of CIFAR-10 under `root`, as torchvision expects them."""
    return [os.path.join(root, BASE_FOLDER, name) for name in FILES]


def missing_files(root: str) -> list[str]:
    return [p for p in cifar_files(root) if not os.path.isfile(p)]


def missing_message(root: str, key: str = "cifar10.root") -> str:
    missing = missing_files(root)
    shown = ", ".join(os.path.basename(p) for p in missing[:3])
    shown += " ..." if len(missing) > 3 else ""
    return (
        f"config key {key!r}: CIFAR-10 not found under {root!r} (missing {shown}). Expected the "
        f"python version as torchvision reads it: {os.path.join(root, BASE_FOLDER)}/"
        f"{{data_batch_1..5, test_batch, batches.meta}}. Get it with internet access by setting "
        f"cifar10.download: true, or download {URL} and extract it into {root!r}; or set "
        f"{key} to where it is."
    )
