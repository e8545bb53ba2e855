"""A study of its own: D(NAD k) with isotropic noise, x = eps * y * v + noise.

The example of docs/pipeline.md, "Adding a study": copy it beside a config that names it
(`study_modules: [toystudy]`, `toy: {enabled: true, architectures: [mlp]}`); the suite runs it
end to end through the real workflow (tests/test_studies.py)."""

from dataclasses import dataclass
from typing import ClassVar

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import torch

from nadpipe.io import generator
from nadpipe.settings import StudySettings, TrainSettings
from nadpipe.studies import Figure, Study, Variant, register


@dataclass(frozen=True)
class ToySettings(StudySettings):
    indices: tuple[int, ...] = (0, 1)
    eps: float = 1.0
    n_train: int = 512
    n_test: int = 256
    train: TrainSettings = TrainSettings(epochs=10)


@dataclass(frozen=True)
class ToyIndex(Variant):
    """Its own path format and column: D(NAD k) as "toy-k"."""

    k: int
    FORMAT: ClassVar[str] = "toy-{k}"
    COLUMNS: ClassVar[dict[str, str]] = {"toy_k": "the NAD index of the toy's direction"}

    def nad_indices(self):
        return (self.k,)


def accuracy(df, arch, output):
    test = df[(df["split"] == "test") & (df["arch"] == arch)]
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot(test["toy_k"], test["accuracy"], "o-")
    ax.set(xlabel="NAD index k", ylabel="test accuracy", title=f"toy: {arch}")
    fig.savefig(output, dpi=80)
    plt.close(fig)


class Toy(Study):
    name = "toy"
    about = "a study that lives in one test: D(NAD k) with isotropic noise"
    settings = ToySettings
    variant = ToyIndex
    data_keys = ("eps", "n_train", "n_test")
    schema = {
        "indices": {"$ref": "#/$defs/index_list"},
        "eps": {"$ref": "#/$defs/positive_number"},
        "n_train": {"$ref": "#/$defs/positive_int"},
        "n_test": {"$ref": "#/$defs/positive_int"},
    }
    figures = {"accuracy": Figure("toystudy:accuracy", "{arch}: test accuracy against k")}

    def build(self, spec, vectors):
        v = vectors[ToyIndex.parse(spec.variant).k].reshape(spec.shape)
        gen = generator("toy", spec.variant, spec.seed)

        def split(n):
            y = torch.arange(n) % 2
            sign = (2 * y - 1).float().view(-1, *[1] * len(spec.shape))
            noise = torch.randn(n, *spec.shape, generator=gen)
            return spec.get("eps") * sign * v + noise, y

        return {"train": split(spec.get("n_train")), "test": split(spec.get("n_test"))}

    def findings(self, df):
        test = df[df["split"] == "test"]
        return [f"toy found mean test accuracy {test['accuracy'].mean():.2f}"]


register(Toy())
