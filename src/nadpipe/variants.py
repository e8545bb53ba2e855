"""A cell of a study's grid: its variant, a frozen dataclass with a path-safe name, the summary
columns it writes and the NAD indices it uses. nadpipe.studies re-exports them: a study of
one's own derives its variant from nadpipe.studies.Variant."""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import ClassVar


class Variant:
    """The base of a cell's variant (a frozen dataclass): its fields, its path (a file-name-safe
    name, `FORMAT` filled with the fields), the summary columns it writes (`COLUMNS`: column ->
    meaning, one per field in the fields' order), and the NAD indices it uses. `parse`, the
    path's regular expression (`PATTERN`, for Snakemake's wildcards) and `columns` are derived
    from those declarations; a variant sets `PATTERN` itself only where a field is a word from a
    fixed set. A variant of a study with NAD `indices` says which NADs it uses (`nad_indices`);
    `register` refuses one that does not."""

    FORMAT: ClassVar[str]  # e.g. "i{i}_j{j}"
    COLUMNS: ClassVar[dict[str, str]]
    PATTERN: ClassVar[str] = ""  # derived from FORMAT when empty (see __init_subclass__)
    _REGEX: ClassVar[re.Pattern]

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "FORMAT" not in cls.__dict__:
            return
        fields = re.findall(r"\{(\w+)\}", cls.FORMAT)
        own = cls.__dict__.get("PATTERN") or None
        parts = re.split(r"\{\w+\}", cls.FORMAT)

        def group(name: str, loose: bool) -> str:
            kind = cls.__annotations__.get(name, "int")
            word = own if own and len(fields) == 1 else r"[A-Za-z][A-Za-z0-9]*"
            body = r"-?\d+" if kind in ("int", int) else word
            return body if loose else f"(?P<{name}>{body})"

        def join(loose: bool) -> str:
            out = re.escape(parts[0])
            for name, after in zip(fields, parts[1:], strict=True):
                out += group(name, loose) + re.escape(after)
            return out

        cls.PATTERN = own or join(loose=True)
        cls._REGEX = re.compile(join(loose=False))

    @property
    def path(self) -> str:
        return self.FORMAT.format(**{f.name: getattr(self, f.name) for f in fields(self)})

    def columns(self) -> dict:
        """The summary columns of this variant, in COLUMNS' order."""
        return {c: getattr(self, f.name) for c, f in zip(self.COLUMNS, fields(self), strict=True)}

    def nad_indices(self) -> tuple[int, ...]:
        """The NAD indices this variant's data use (none by default)."""
        return ()

    @classmethod
    def parse(cls, path: str):
        found = cls._REGEX.fullmatch(path)
        if found is None:
            raise ValueError(f"{path!r} is not a {cls.__name__} path ({cls.FORMAT})")
        types = {f.name: f.type for f in fields(cls)}
        return cls(
            **{k: int(v) if types[k] in ("int", int) else v for k, v in found.groupdict().items()}
        )


@dataclass(frozen=True)
class IndexPair(Variant):
    """Channel block 1 ~ D(NAD i), block 2 ~ D(NAD j)."""

    i: int
    j: int
    FORMAT: ClassVar[str] = "i{i}_j{j}"
    COLUMNS: ClassVar[dict[str, str]] = {
        "nad_i": "the NAD index of channel 1 (0: learned most easily)",
        "nad_j": "the NAD index of channel 2",
    }

    def nad_indices(self) -> tuple[int, ...]:
        return (self.i, self.j)


@dataclass(frozen=True)
class NadIndex(Variant):
    """D(NAD k)."""

    k: int
    FORMAT: ClassVar[str] = "k{k}"
    COLUMNS: ClassVar[dict[str, str]] = {"nad_k": "the NAD index of the direction v"}

    def nad_indices(self) -> tuple[int, ...]:
        return (self.k,)


@dataclass(frozen=True)
class Poisoned(Variant):
    """Class codes carried along NADs i and i + 1."""

    i: int
    FORMAT: ClassVar[str] = "p{i}"
    COLUMNS: ClassVar[dict[str, str]] = {"nad_i": "the poisoned NAD index i (carriers i, i + 1)"}

    def nad_indices(self) -> tuple[int, ...]:
        return (self.i, self.i + 1)


@dataclass(frozen=True)
class Frequency(Variant):
    """The real 2-D DFT direction of frequency (a, b)."""

    a: int
    b: int
    FORMAT: ClassVar[str] = "f{a}_{b}"
    COLUMNS: ClassVar[dict[str, str]] = {
        "freq_a": "the DFT frequency a (rows of the map)",
        "freq_b": "the DFT frequency b (columns)",
    }


@dataclass(frozen=True)
class Representation(Variant):
    """CIFAR-10 as it is ("original") or in the reversed NAD basis ("flipped")."""

    name: str
    FORMAT: ClassVar[str] = "{name}"
    PATTERN: ClassVar[str] = "original|flipped"
    COLUMNS: ClassVar[dict[str, str]] = {
        "representation": "`original` CIFAR-10, or `flipped` (in the reversed NAD basis)"
    }
