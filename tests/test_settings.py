"""One source of defaults: the settings classes hold them; the schema, the docs and the
configs agree with them."""

import copy
import re
from dataclasses import fields, is_dataclass

import pytest
import yaml
from conftest import REPO, SCHEMA
from snakemake.utils import update_config

from nadpipe import config as nc
from nadpipe import settings as st
from nadpipe.config import STUDY_SETTINGS
from nadpipe.config.keys import _resolve as schema_node

SCHEMA_DATA = yaml.safe_load(SCHEMA.read_text())
PAPER_CONFIGS = ["paper_sec3", "paper_sec4", "paper_poison", "paper_flip", "nad_paper"]


def _props(node):
    return schema_node(SCHEMA_DATA, node)["properties"]


def _blocks():
    """(key, schema node, settings class or instance) of every block of the config."""
    props = SCHEMA_DATA["properties"]
    out = [
        ("architectures.NAME", props["architectures"]["additionalProperties"], st.Architecture())
    ]
    out += [(b, props[b], cls()) for b, cls in st.BLOCKS.items()]
    out += [(s, props[s], cls()) for s, cls in STUDY_SETTINGS.items()]
    return out


def _leaves(node, default, prefix):
    for name, sub in _props(node).items():
        value = getattr(default, name)
        if is_dataclass(value):
            yield from _leaves(sub, value, f"{prefix}.{name}")
        else:
            yield f"{prefix}.{name}", schema_node(SCHEMA_DATA, sub), value


def test_the_schema_has_exactly_the_keys_of_the_settings_classes():
    for key, node, default in _blocks():
        assert set(_props(node)) == {f.name for f in fields(default)}, key
        for f in fields(default):
            value = getattr(default, f.name)
            if is_dataclass(value):
                assert set(_props(_props(node)[f.name])) == {g.name for g in fields(value)}, (
                    f"{key}.{f.name}"
                )


def _types(node):
    """The JSON types a schema node allows, through $ref, anyOf and allOf."""
    if "$ref" in node:
        node = {**SCHEMA_DATA["$defs"][node["$ref"].split("/")[-1]], **node}
        node.pop("$ref")
    kinds = set()
    if "type" in node:
        kinds |= {node["type"]} if isinstance(node["type"], str) else set(node["type"])
    if "enum" in node:
        kinds.add("string")
    for sub in node.get("anyOf", []) + node.get("allOf", []):
        kinds |= _types(sub)
    return kinds


@pytest.mark.parametrize(
    ("key", "node", "default"), [leaf for k, n, d in _blocks() for leaf in _leaves(n, d, k)]
)
def test_every_default_has_the_type_the_schema_gives_and_validates(key, node, default):
    kinds = _types(node)
    expected = {
        bool: "boolean",
        int: "integer",
        float: "number",
        str: "string",
        tuple: "array",
        dict: "object",
        type(None): "null",
        st.Shape: "array",
    }[type(default)]
    assert expected in kinds or (expected == "integer" and "number" in kinds), (key, kinds)
    assert node.get("description") or "description" in schema_node(SCHEMA_DATA, node), key


def test_an_empty_config_resolves_to_the_settings_defaults():
    cfg, warnings = nc.load_config({}, SCHEMA)
    resolved = cfg.resolved()
    for block, cls in st.BLOCKS.items():
        assert resolved[block] == st.defaults(cls), block
    for study, cls in STUDY_SETTINGS.items():
        assert resolved[study] == st.defaults(cls), study
    assert cfg.studies["nad_pairs"].enabled and warnings == []


def test_the_docs_list_every_key_with_its_default_and_meaning():
    page = (REPO / "docs" / "keys.md").read_text()
    table = nc.reference_table(SCHEMA)
    assert table in page, "docs/keys.md is stale: regenerate it with python3 docs/generate.py"


def test_config_yaml_sets_only_commented_cpu_sized_values():
    lines = (REPO / "config.yaml").read_text().splitlines()
    for n, line in enumerate(lines):
        m = re.match(r"\s*([A-Za-z_0-9]+):\s*(\S.*)?$", line.split("#")[0])
        if m and m[2]:  # a key with a value
            assert "#" in line or "#" in lines[n + 1], (
                f"config.yaml line {n + 1} has no comment: {line}"
            )
    cfg = yaml.safe_load("\n".join(lines))
    defaults = nc.build({})
    assert cfg["nads"]["n_networks"] < defaults.nads.n_networks  # CPU-sized, not a re-statement
    assert cfg["nad_pairs"]["n_train"] < defaults.studies["nad_pairs"].n_train


def _flat(d, prefix=()):
    for k, v in d.items():
        if isinstance(v, dict) and v:
            yield from _flat(v, (*prefix, k))
        else:
            yield (*prefix, k)


def _relevant(path, merged):
    """Whether a key config.yaml sets matters for a run of `merged`."""
    head = path[0]
    enabled = [s for s in STUDY_SETTINGS if merged.get(s, {}).get("enabled", s == "nad_pairs")]
    if head in STUDY_SETTINGS:
        return head in enabled
    if head == "architectures":
        used = {
            a
            for s in enabled
            for a in merged[s].get("architectures", STUDY_SETTINGS[s]().architectures)
        }
        return path[1] in used
    if head == "analysis":
        return bool({"nad_pairs", "cifar_nad"} & set(enabled))
    return True


@pytest.mark.parametrize("name", PAPER_CONFIGS)
def test_paper_configs_do_not_silently_inherit_a_cpu_sized_value(name):
    base = yaml.safe_load((REPO / "config.yaml").read_text())
    paper = yaml.safe_load((REPO / "configs" / f"{name}.yaml").read_text())
    merged = copy.deepcopy(base)
    update_config(merged, paper)  # as snakemake --configfile merges it
    for path in _flat(base):
        if not _relevant(path, merged):
            continue
        node = paper
        for k in path:
            assert isinstance(node, dict) and k in node, (
                f"configs/{name}.yaml inherits {'.'.join(map(str, path))} from config.yaml (a "
                "CPU-sized value): set it"
            )
            node = node[k]
