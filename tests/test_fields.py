"""One declaration per user-facing field: the DeviceSpec / MemoryLevel field metadata drives the range
checks, the preset loader, the deployment-TOML parser and the key table in docs/keys.md, so they cannot drift."""

from __future__ import annotations

import math
import re
import tomllib

import pytest
from deploy_toml import board_deployment

from workbench.core.errors import WorkbenchError
from workbench.core.fields import FieldSpec, TomlKey, declared_fields
from workbench.core.io import REPO_ROOT
from workbench.machine.hardware import DeviceSpec, MemoryLevel, load_device
from workbench.scenarios.userconfig import (
    DEVICE_KEYS,
    ENTRY_FIELDS,
    MEMORY_KEYS,
    NETWORK_FIELDS,
    NETWORK_KEYS,
    PRESET_OVERRIDES,
    WORKLOAD_FIELDS,
    WORKLOAD_KEYS,
    config_from_text,
    config_keys_table,
    parse_config,
)

# keys that must be set together (both > 0 or both 0): the other one, set when a test sets one
PARTNERS = {"small_kernel_mib": "core_stream_gb_per_s = 10", "core_stream_gb_per_s": "small_kernel_mib = 4",
            "access_link_mbps": "access_link_latency_ms = 1", "access_link_latency_ms": "access_link_mbps = 100"}
KEYS_BLOCK = re.compile(r"<!-- device-keys:[^\n]*-->\n(.*?)<!-- /device-keys -->", re.S)
CONFIG = board_deployment('{extra}\ndevice_class = "cpu"', bandwidth_gb_per_s=17)  # unstated memory_efficiency: typical


def readme_table() -> str:
    """The device-key table docs/keys.md carries between its device-keys markers."""
    found = KEYS_BLOCK.search((REPO_ROOT / "docs" / "keys.md").read_text())
    assert found, "docs/keys.md has no <!-- device-keys --> block"
    return found.group(1)


def test_readme_key_table_is_the_generated_one():
    assert readme_table() == config_keys_table(), \
        "docs/keys.md's <!-- device-keys --> block is stale: paste workbench.scenarios.userconfig.config_keys_table() into it"


def test_every_toml_key_is_declared_once_and_accepted_by_the_parser():
    for cls in (DeviceSpec, MemoryLevel):
        declared = [tk.key for _, spec in declared_fields(cls) for tk in spec.toml]
        assert len(declared) == len(set(declared)), cls
    assert set(DEVICE_KEYS) == {tk.key for _, s in declared_fields(DeviceSpec) for tk in s.toml} | \
        set(ENTRY_FIELDS) | {"sources"}
    assert set(MEMORY_KEYS) == {tk.key for _, s in declared_fields(MemoryLevel) for tk in s.toml} | {"sources"}
    for key in DEVICE_KEYS:
        assert f"`{key}" in config_keys_table() or key == "sources"


@pytest.mark.parametrize("field_name", [f.name for f, s in declared_fields(DeviceSpec)
                                        if s.kind == "number" and s.toml])
def test_each_number_key_is_checked_in_toml_units_and_scaled_to_si(field_name):
    """A value at the file's upper bound parses to the SI value; one past it is one line naming the key."""
    spec = DeviceSpec.__dataclass_fields__[field_name].metadata["spec"]
    [(key, scale, _)] = spec.toml
    high = min(spec.high, spec.file_high) / scale
    partner = PARTNERS.get(key, "")  # a key that is on only together with another
    device = config_from_text(CONFIG.replace("{extra}", f"{key} = {high!r}\n{partner}"), "t.toml").cluster.devices[0]
    assert getattr(device, field_name) == pytest.approx(high * scale)
    assert PRESET_OVERRIDES[key] == (field_name, scale)
    with pytest.raises(WorkbenchError) as info:
        config_from_text(CONFIG.replace("{extra}", f"{key} = {high * 2!r}\n{partner}"), "t.toml")
    message = str(info.value)
    assert "\n" not in message and f"devices[0].{key} must be {spec.range_text(scale, from_file=True)}" in message


@pytest.mark.parametrize("cls", [DeviceSpec, MemoryLevel])
def test_instances_check_the_declared_invariant(cls):
    """Every declared number of an instance is range-checked, with one line naming the field and the range."""
    base = {DeviceSpec: load_device("siracusa"), MemoryLevel: load_device("siracusa").memory[0]}[cls]
    for f, spec in declared_fields(cls):
        if spec.kind not in ("number", "integer"):
            continue
        bad = spec.low - 1 if spec.kind == "integer" else (spec.low if spec.low_open else -1.0)
        with pytest.raises(WorkbenchError) as info:
            base.__class__(**{**{g.name: getattr(base, g.name) for g, _ in declared_fields(cls)}, f.name: bad})
        assert "\n" not in str(info.value) and f.name in str(info.value) and spec.range_text() in str(info.value)


def test_file_bounds_are_tighter_than_the_invariant_and_print_in_the_keys_units():
    spec = FieldSpec("x", "s", 0.0, math.inf, file_high=1.0, toml=(TomlKey("x_us", 1e-6, "µs"),))
    assert spec.range_text() == "a finite number >= 0"
    assert spec.range_text(1e-6, from_file=True) == "a number >= 0 and <= 1e+06"
    assert spec.check("x", 2.0) == 2.0  # any finite value >= 0 in code
    with pytest.raises(WorkbenchError, match=r"^x_us must be a number >= 0 and <= 1e\+06, got 2000000.0$"):
        spec.check("x_us", 2e6, 1e-6, from_file=True)
    for bad in (math.nan, math.inf, True, "1", None):
        with pytest.raises(WorkbenchError):
            spec.check("x", bad)


@pytest.mark.parametrize("section, key", [(section, key) for section, declared in
                                          (("network", NETWORK_FIELDS), ("workload", WORKLOAD_FIELDS))
                                          for key, spec in declared.items() if spec.kind != "text"])
def test_network_and_workload_keys_are_checked_against_their_declaration(section, key):
    spec = {**NETWORK_FIELDS, **WORKLOAD_FIELDS}[key]
    assert key in {"network": NETWORK_KEYS, "workload": WORKLOAD_KEYS}[section]
    table = tomllib.loads(CONFIG.replace("{extra}", ""))
    table.setdefault(section, {})[key] = spec.high + 1 if spec.kind == "integer" else spec.high * 2
    with pytest.raises(WorkbenchError) as info:
        parse_config(table, "t.toml")
    message = str(info.value)
    assert "\n" not in message and f"{section}.{key} must be {spec.range_text(from_file=True)}" in message


def test_network_workload_and_model_keys_are_declared_on_the_dataclasses_they_set():
    from workbench.machine.network import Link, Topology
    from workbench.model.models import TransformerConfig
    from workbench.scenarios.userconfig import KEY_FIELDS
    from workbench.schemes.base import Workload

    owners = {tk.key: cls for cls in (Link, Topology, Workload, TransformerConfig)
              for _, spec in declared_fields(cls) for tk in spec.toml}
    assert set(NETWORK_FIELDS) | set(WORKLOAD_FIELDS) <= set(owners)
    for key, field in KEY_FIELDS.items():
        if key != "count":
            assert any(field.spec is spec for _, spec in declared_fields(owners[key])), key
    # a key's range is checked in the units the file writes and returned in SI
    assert NETWORK_FIELDS["bandwidth_mbps"].check("b", 8) == 1e6 and NETWORK_FIELDS["bandwidth_mbps"].high == 1e7
    assert NETWORK_FIELDS["latency_ms"].check("l", 2) == 2e-3


def test_an_open_upper_bound_refuses_the_bound_and_says_so():
    spec = FieldSpec("p", "1", 0.0, 1.0, high_open=True, toml=(TomlKey("p"),))
    assert spec.range_text() == "a number >= 0 and < 1"
    assert spec.check("p", 0.999) == pytest.approx(0.999)
    with pytest.raises(WorkbenchError, match=r"^p must be a number >= 0 and < 1, got 1\.0$"):
        spec.check("p", 1.0)
    tighter = FieldSpec("q", "1", 0.0, 1.0, high_open=True, file_high=0.5)  # a file's own bound is inclusive
    assert tighter.range_text(from_file=True) == "a number >= 0 and <= 0.5" and tighter.check("q", 0.5, True) == 0.5


@pytest.mark.parametrize(("table", "key"), [("speculative", "alpha"), ("workload", "routing_locality")])
def test_the_keys_table_gives_the_open_bound_the_parser_enforces(table, key):
    """docs/keys.md (generated from the declaration) says < 1 where the tool refuses 1."""
    row = next(line for line in config_keys_table().splitlines() if line.startswith(f"| `[{table}]` | `{key}` |"))
    assert "| number >= 0 and < 1 |" in row
    body = 'draft = "ngram"\nalpha = 1.0' if table == "speculative" else 'routing = "skewed"\nrouting_locality = 1.0'
    text = (REPO_ROOT / "examples" / "qwen3_moe_pi5.toml").read_text()
    text = text + f"\n[speculative]\n{body}\n" if table == "speculative" else \
        text.replace("[workload]\n", f"[workload]\n{body}\n", 1)
    with pytest.raises(WorkbenchError, match=rf"{table}\.{key} must be a number >= 0 and < 1, got 1\.0$"):
        config_from_text(text, "t.toml")
