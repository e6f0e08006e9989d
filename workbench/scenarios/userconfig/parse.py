"""TOML -> `UserConfig`: devices, network and model from a deployment file (stdlib tomllib), validated on load.

A file describes one deployment (see examples/*.toml)::

    [meta]     name = "..."
    [model]    name = "Llama 2-7B" (a registered model, any case or an alias) or family/n_layers/d_model/...
               weight_format = "q4_0" (or weight_bits = 4.5), activation_format = "q8_0" (or activation_bits:
               activations in memory and on the wire), kv_format = "fp16" (or kv_bits; default: the activations')
               The arithmetic class holds both operands' codes: q4_0 x q8_0 runs at the device's int8 peak.
    [workload] seq_len = 128, kv_len = 128            # prompt length; tokens attended per decode step
    [network]  topology = "switch", bandwidth_mbps = 1000, latency_ms = 0.1  # per hop
               message_overhead_us = 50   # software time per message at each endpoint (fixed cost)
    [[devices]] name, count, peak_gflops = {fp16 = .., int8 = ..}, efficiency_gemm, efficiency_gemv,
                memory_efficiency, kernel_launch_us, layer_overhead_us (fixed costs per kernel / per layer),
                storage_read_mb_per_s, [[devices.memory]] name, capacity_mib | capacity_gib, bandwidth_gb_per_s
                (or preset = "<data/devices id>" with count)

Any table may carry a `[*.sources]` sub-table mapping its numeric keys to a citation or "assumed".
Every error is one line naming the key (e.g. ``devices[1].memory[0].bandwidth_gb_per_s``) and the
allowed range; a model that cannot fit anywhere is an `InfeasibleError`.

Each key's unit, scale to SI, range and help is declared once, as a `FieldSpec` (`workbench.core.fields`) on the
dataclass field it sets: the [[devices]] and [[devices.memory]] keys on `DeviceSpec` / `MemoryLevel`, the
[network] keys on `Link` / `Topology`, the [workload] keys and the [model] bits on `Workload`, the [model]
dimensions on `TransformerConfig`; the parser's accepted keys, its range checks and the key table in docs/keys.md
(`config_keys_table`) derive from them (`section_fields`).
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import MISSING, replace
from pathlib import Path

from workbench.core.errors import InfeasibleError, WorkbenchError
from workbench.core.fields import declared_fields, is_number
from workbench.core.units import GIB, MIB
from workbench.machine.hardware import (
    DTYPES,
    DeviceSpec,
    MemoryLevel,
    device_from_table,
    device_names,
    load_device,
    parse_isa,
    typical_memory_efficiency,
    with_board_ram,
)
from workbench.machine.network import LINK_CLASSES, TOPOLOGY_KINDS, Link, Topology, link_class
from workbench.model.formats import RECIPE_DEFAULTS, recipe_bits
from workbench.model.modelfile import expand_file, read_model_file, resolve_path
from workbench.model.models import FAMILIES, MODELS, ROUTERS, TransformerConfig, find_model
from workbench.model.routing import (
    CACHE_POLICIES,
    EXPERT_READS,
    ROUTING_KINDS,
    TRACE_DIR,
    ExpertCache,
    Routing,
    check_cache,
    trace_path,
)
from workbench.scenarios.speculative import Speculation, check_draft, check_lengths
from workbench.scenarios.userconfig.schema import (
    BOARD_KEYS,
    CACHE_FIELDS,
    CAPACITY_UNITS,
    CLUSTER_KEYS,
    DEVICE_KEYS,
    ENTRY_FIELDS,
    KEY_FIELDS,
    MEMORY_KEYS,
    META_KEYS,
    MODEL_DIMS,
    MODEL_FIELDS,
    MODEL_KEYS,
    NETWORK_KEYS,
    PRESET_OVERRIDES,
    ROUTING_FIELDS,
    SPECULATIVE_FIELDS,
    SPECULATIVE_KEYS,
    TOP_KEYS,
    WEIGHT_FORMATS,
    WORKLOAD_KEYS,
    UserConfig,
)
from workbench.schemes.base import Cluster, Workload
from workbench.schemes.workload import ENGINE_NAMES


# ---- one-line checks naming the key ------------------------------------------------------------
def _number(where: str, key: str, value, field_key: str | None = None) -> float:
    """A finite real in KEY_FIELDS[field_key]'s range, in SI, else a one-line error naming `key` and the range."""
    return KEY_FIELDS[field_key or key.rsplit(".", 1)[-1]].check(f"{where}: {key}", value)


def _integer(where: str, key: str, value) -> int:
    """An int in its KEY_FIELDS range, else a one-line error naming `key` and the range."""
    return KEY_FIELDS[key.rsplit(".", 1)[-1]].check(f"{where}: {key}", value)


def _text(where: str, key: str, value) -> str:
    """A non-empty string, else a one-line error."""
    if not isinstance(value, str) or not value.strip():
        raise WorkbenchError(f"{where}: {key} must be a non-empty string, got {value!r}")
    return value


def _table(where: str, key: str, value, allowed: tuple[str, ...], required: tuple[str, ...] = ()) -> dict:
    """A TOML table with only `allowed` keys and every `required` one, else a one-line error."""
    if not isinstance(value, dict):
        raise WorkbenchError(f"{where}: {key} must be a table, got {type(value).__name__}")
    unknown = sorted(set(value) - set(allowed))
    if unknown:
        raise WorkbenchError(f"{where}: unknown key {key + '.' if key else ''}{unknown[0]}; allowed: {', '.join(allowed)}")
    for name in required:
        if name not in value:
            raise WorkbenchError(f"{where}: missing key {key + '.' if key else ''}{name}")
    sources = value.get("sources", {})
    if not isinstance(sources, dict) or not all(isinstance(v, str) for v in sources.values()):
        raise WorkbenchError(f"{where}: {key}.sources must be a table of strings (key = \"citation\")")
    return value


# ---- sections ----------------------------------------------------------------------------------
def _bits(where: str, table: dict, name: str, default: float | None) -> float | None:
    """`<name>_format` (a named format) or `<name>_bits` (a number), not both; `default` when neither."""
    fmt_key, bits_key = f"{name}_format", f"{name}_bits"
    if fmt_key in table and bits_key in table:
        raise WorkbenchError(f"{where}: give model.{bits_key} or model.{fmt_key}, not both")
    if fmt_key in table:
        fmt = table[fmt_key]
        if not isinstance(fmt, str) or fmt not in WEIGHT_FORMATS:
            recipes = f" or a llama.cpp file type {', '.join(RECIPE_DEFAULTS)}" if name == "weight" else ""
            raise WorkbenchError(f"{where}: model.{fmt_key} must be one of {', '.join(WEIGHT_FORMATS)}{recipes}, "
                                 f"got {fmt!r}")
        return WEIGHT_FORMATS[fmt]
    if bits_key in table:
        return _number(where, f"model.{bits_key}", table[bits_key], "weight_bits")
    return default


def parse_model(where: str, table: dict, base_dir: Path | None = None) -> tuple[TransformerConfig, float, float]:
    """The [model] table; a weight_format naming a llama.cpp file type (Q4_K_M) gives that model's file's
    average bits per weight (`formats.recipe_bits`); a `file` gives the keys it holds (`modelfile.expand_file`)."""
    table = expand_file(where, table, base_dir)[0]
    recipe = table.get("weight_format") if isinstance(table, dict) else None
    if not (isinstance(recipe, str) and recipe in RECIPE_DEFAULTS):
        return _model_and_bits(where, table)
    if "weight_bits" in table:
        raise WorkbenchError(f"{where}: give model.weight_bits or model.weight_format, not both")
    model, _, activation_bits = _model_and_bits(where, {k: v for k, v in table.items() if k != "weight_format"})
    try:
        return model, recipe_bits(model, recipe), activation_bits
    except WorkbenchError as exc:
        raise WorkbenchError(f"{where}: model.weight_format: {exc}") from None


def _model_and_bits(where: str, table: dict) -> tuple[TransformerConfig, float, float]:
    """The [model] table: a registered name or dimensions, plus weight/activation bits (formats or numbers)."""
    table = _table(where, "model", table, MODEL_KEYS)
    weight_bits = _bits(where, table, "weight", 16.0)
    activation_bits = _bits(where, table, "activation", 16.0)
    dims = {k: table[k] for k in MODEL_DIMS if k in table}
    name = table.get("name")
    found = find_model(name) if isinstance(name, str) else None
    if found is not None and dims:  # a registered model with some dimensions changed (e.g. fewer layers)
        return _changed_model(where, found, dims), weight_bits, activation_bits
    if not dims:
        if found is None:
            raise WorkbenchError(f"{where}: model.name must be a registered model ({', '.join(MODELS)}; any case, "
                                 f"or an alias such as 'Llama 3 8B') or give the dimensions "
                                 f"{', '.join(MODEL_DIMS[:6])}, got {name!r}")
        return found, weight_bits, activation_bits
    for key in ("family", "n_layers", "d_model", "n_heads", "d_ff", "vocab_size"):
        if key not in dims:
            raise WorkbenchError(f"{where}: missing key model.{key} (a model given by its dimensions needs "
                                 "family, n_layers, d_model, n_heads, d_ff, vocab_size)")
    if not isinstance(dims["family"], str) or dims["family"] not in FAMILIES:
        raise WorkbenchError(f"{where}: model.family must be one of {', '.join(FAMILIES)}, got {dims['family']!r}")
    for key, value in dims.items():
        if key in MODEL_FIELDS:
            _integer(where, f"model.{key}", value)
    if "router" in dims and not isinstance(dims["router"], str):
        raise WorkbenchError(f"{where}: model.router must be one of {', '.join(ROUTERS)}, got {dims['router']!r}")
    if "tie_embeddings" in dims and not isinstance(dims["tie_embeddings"], bool):
        raise WorkbenchError(f"{where}: model.tie_embeddings must be true or false")
    name = _text(where, "model.name", table.get("name", "custom"))
    try:
        model = TransformerConfig(name=name, source=f"user config {where}", **dims)
    except WorkbenchError as exc:
        raise WorkbenchError(f"{where}: model: {exc}") from None
    return model, weight_bits, activation_bits


def _changed_model(where: str, base: TransformerConfig, dims: dict) -> TransformerConfig:
    """A registered model with the given dimensions overridden, each checked like a full description."""
    if "family" in dims and dims["family"] != base.family:
        raise WorkbenchError(f"{where}: model.family of {base.name} is {base.family!r}; a different family needs "
                             "all the dimensions and no registered name")
    for key, value in dims.items():
        if key in MODEL_FIELDS:
            _integer(where, f"model.{key}", value)
    if "router" in dims and not isinstance(dims["router"], str):
        raise WorkbenchError(f"{where}: model.router must be one of {', '.join(ROUTERS)}, got {dims['router']!r}")
    if "tie_embeddings" in dims and not isinstance(dims["tie_embeddings"], bool):
        raise WorkbenchError(f"{where}: model.tie_embeddings must be true or false")
    changes = {k: v for k, v in dims.items() if k != "family"}
    try:
        return base.with_changes(name=f"{base.name} ({', '.join(f'{k}={v}' for k, v in changes.items())})",
                                 **changes)
    except WorkbenchError as exc:
        raise WorkbenchError(f"{where}: model: {exc}") from None


def required_keys(cls) -> tuple[str, ...]:
    """TOML keys a table for `cls` must give: those of its fields without a default that have one key."""
    return tuple(spec.toml[0].key for f, spec in declared_fields(cls) if f.default is MISSING and len(spec.toml) == 1)


def declared_numbers(where: str, key: str, table: dict, cls) -> dict[str, float]:
    """SI values of the declared number fields of `cls` that `table` sets, each checked against its field's
    range in the TOML key's units; a field with alternative keys (capacity_kib | _mib | _gib) takes one."""
    out = {}
    for f, spec in declared_fields(cls):
        if spec.kind not in ("number", "integer") or not spec.toml:
            continue
        given = [tk for tk in spec.toml if tk.key in table]
        if len(spec.toml) > 1 and (len(given) > 1 or (not given and f.default is MISSING)):
            raise WorkbenchError(f"{where}: {key} needs exactly one of {', '.join(tk.key for tk in spec.toml)}")
        if given:
            out[f.name] = spec.check(f"{where}: {key}.{given[0].key}", table[given[0].key], given[0].scale, True)
    return out


def parse_memory(where: str, key: str, table: dict) -> MemoryLevel:
    """One [[devices.memory]] level: its declared keys (name, capacity in one unit, bandwidth in GB/s)."""
    table = _table(where, key, table, MEMORY_KEYS, required_keys(MemoryLevel))
    numbers = declared_numbers(where, key, table, MemoryLevel)
    return MemoryLevel(_text(where, f"{key}.name", table["name"]), **numbers)


def load_preset(where: str, key: str, preset: str, base_dir: Path | None, field_name: str = "preset") -> DeviceSpec:
    """A device preset: a data/devices id, or a path to a device TOML (relative to the config file), so one
    board's description (e.g. written by `python -m workbench profile`) is shared between configs."""
    if not (preset.endswith(".toml") or "/" in preset):
        if preset not in device_names():
            raise WorkbenchError(f"{where}: {key}.{field_name} {preset!r} is not a device preset; allowed: a path to a "
                                 f"device TOML (relative to {where}) or one of {', '.join(device_names())}")
        return load_device(preset)
    path = Path(preset) if Path(preset).is_absolute() or base_dir is None else base_dir / preset
    if not path.is_file():
        raise WorkbenchError(f"{where}: {key}.{field_name} file {str(path)!r} does not exist (a data/devices id or a "
                             "path to a device TOML)")
    try:
        with open(path, "rb") as f:
            return device_from_table(tomllib.load(f), path.name)
    except tomllib.TOMLDecodeError as exc:
        raise WorkbenchError(f"{where}: {key}.{field_name} {path.name}: not valid TOML: {exc}") from None


def parse_device(where: str, index: int, table: dict, base_dir: Path | None = None) -> tuple[DeviceSpec, int]:
    """One [[devices]] entry -> (spec, count): a preset (id or device-TOML path) or peaks, efficiencies, memory."""
    key = f"devices[{index}]"
    table = _table(where, key, table, DEVICE_KEYS)
    count = _integer(where, f"{key}.count", table.get("count", 1))
    if "preset" in table:
        extra = sorted(set(table) - {"preset", "count", "name", "sources", "isa", *BOARD_KEYS, *PRESET_OVERRIDES})
        if extra:
            raise WorkbenchError(f"{where}: {key} uses preset, so {extra[0]} is not allowed (only name, count, isa, "
                                 f"{', '.join(BOARD_KEYS)}, {', '.join(PRESET_OVERRIDES)})")
        spec = load_preset(where, key, _text(where, f"{key}.preset", table["preset"]), base_dir)
        spec = preset_board(where, key, spec, table)
        changes = declared_numbers(where, key, table, DeviceSpec)
        if "name" in table:
            changes["name"] = _text(where, f"{key}.name", table["name"])
        if "isa" in table:  # the features this board's cores have, over the preset's
            changes["isa"] = parse_isa(f"{where}: {key}.isa", table["isa"])
        try:
            return spec.with_changes(**changes), count
        except WorkbenchError as exc:
            raise WorkbenchError(f"{where}: {key}: {exc}") from None
    for name in (*required_keys(DeviceSpec), "memory"):  # a preset may list no memory; a file's device must
        if name not in table:
            raise WorkbenchError(f"{where}: missing key {key}.{name}")
    for name in ("ram_gib", "os_reserve_gib"):
        if name in table:
            raise WorkbenchError(f"{where}: {key}.{name} needs preset (a board's RAM and OS reserve); a device of "
                                 "its own states its memory capacity directly")
    peak_flops = parse_peaks(where, key, table)
    levels = table["memory"]
    if not isinstance(levels, list) or not levels:
        raise WorkbenchError(f"{where}: {key}.memory must be a list of [[devices.memory]] levels (innermost first)")
    memory = tuple(parse_memory(where, f"{key}.memory[{j}]", level) for j, level in enumerate(levels))
    if len({m.name for m in memory}) != len(memory):
        raise WorkbenchError(f"{where}: {key}.memory level names must be unique")
    fields = dict(  # every number checked here, so a DeviceSpec error below is a cross-field one
        name=_text(where, f"{key}.name", table["name"]), peak_flops=peak_flops, memory=memory,
        **declared_numbers(where, key, table, DeviceSpec))
    if "device_class" in table:
        fields["device_class"] = _text(where, f"{key}.device_class", table["device_class"])
    if "isa" in table:
        fields["isa"] = parse_isa(f"{where}: {key}.isa", table["isa"])
    if "memory_efficiency" not in table:  # no silent 1.0: the class's typical value, noticed by whatif
        typical = typical_memory_efficiency(fields.get("device_class", ""), fields["name"], f"{where}: {key}")
        fields.update(memory_efficiency=typical.value, provenance={"memory_efficiency": typical})
    try:
        spec = DeviceSpec(**fields)
    except WorkbenchError as exc:
        raise WorkbenchError(f"{where}: {key}: {exc}") from None
    return spec, count


def preset_board(where: str, key: str, spec: DeviceSpec, table: dict) -> DeviceSpec:
    """A preset's board as a [[devices]] entry buys it: `ram_gib` (one of the preset's RAM variants), a
    [[devices.memory]] capacity or bandwidth of a named level, `os_reserve_gib`; the model's memory is then the
    board's RAM less the OS reserve (`hardware.with_board_ram`). No board key: the preset as it is."""
    if not any(name in table for name in BOARD_KEYS):
        return spec
    ram = ENTRY_FIELDS["ram_gib"].check(f"{where}: {key}.ram_gib", table["ram_gib"], GIB, True) \
        if "ram_gib" in table else None
    if ram is not None:
        variants = spec.ram_variants
        if not variants:
            raise WorkbenchError(f"{where}: {key}.ram_gib: preset {spec.name!r} lists no RAM variants; give its "
                                 "[[devices.memory]] capacity_gib instead")
        if not any(math.isclose(ram, v * GIB) for v in variants):
            raise WorkbenchError(f"{where}: {key}.ram_gib must be one of {', '.join(f'{v:g}' for v in variants)} "
                                 f"(the RAM sizes {spec.name} is sold in, GiB), got {table['ram_gib']!r}")
    spec, outer = preset_memory(where, key, spec, table.get("memory", []))
    if outer is not None and ram is not None:
        raise WorkbenchError(f"{where}: give {key}.ram_gib or the capacity of {key}.memory's {spec.memory[-1].name}, "
                             "not both")
    reserve = ENTRY_FIELDS["os_reserve_gib"].check(f"{where}: {key}.os_reserve_gib", table["os_reserve_gib"], GIB,
                                                   True) if "os_reserve_gib" in table else None
    if ram is None and outer is None and reserve is None:
        return spec
    board_ram = ram or outer or spec.board_ram_bytes or spec.memory_bytes
    if reserve is not None and reserve >= board_ram:
        raise WorkbenchError(f"{where}: {key}.os_reserve_gib must be below the board's RAM ({board_ram / GIB:g} GiB), "
                             f"got {table['os_reserve_gib']!r}")
    board = with_board_ram(spec, ram if ram is not None else outer, reserve, f"{where}: {key}",
                           f"{key} in {where} (a deployment's value)")
    sold = ram if ram is not None else outer
    return board if sold is None else board.with_changes(name=_sized_name(board.name, sold))


def _sized_name(name: str, ram_bytes: float) -> str:
    """A preset's name with its RAM size replaced ('Raspberry Pi 5 (8 GB)' -> '... (16 GB)'), else appended."""
    size = f"({ram_bytes / GIB:g} GB)"
    named = re.sub(r"\(\d+(\.\d+)? GB\)", size, name)
    return named if named != name or size in name else f"{name} {size}"


def preset_memory(where: str, key: str, spec: DeviceSpec, levels) -> tuple[DeviceSpec, float | None]:
    """[[devices.memory]] under a preset: each names one of the preset's levels and may set its capacity (one
    unit) and bandwidth_gb_per_s. Returns the device with the inner levels changed and the outermost level's new
    capacity (the board's RAM, budgeted by the caller), None when not given."""
    if not isinstance(levels, list):
        raise WorkbenchError(f"{where}: {key}.memory must be a list of [[devices.memory]] tables")
    outer = None
    for j, level in enumerate(levels):
        where_key = f"{key}.memory[{j}]"
        level = _table(where, where_key, level, MEMORY_KEYS, ("name",))
        names = [m.name for m in spec.memory]
        if level["name"] not in names:
            raise WorkbenchError(f"{where}: {where_key}.name must be one of the preset's levels "
                                 f"({', '.join(names) or 'none'}), got {level['name']!r}")
        given = [k for k in CAPACITY_UNITS if k in level]
        if len(given) > 1:
            raise WorkbenchError(f"{where}: {where_key} needs at most one of {', '.join(CAPACITY_UNITS)}")
        fields = MemoryLevel.__dataclass_fields__
        changes = {}
        if given:
            spec_c = fields["capacity_bytes"].metadata["spec"]
            changes["capacity_bytes"] = spec_c.check(f"{where}: {where_key}.{given[0]}", level[given[0]],
                                                     CAPACITY_UNITS[given[0]], True)
        if "bandwidth_gb_per_s" in level:
            changes["bandwidth_bytes_per_s"] = fields["bandwidth_bytes_per_s"].metadata["spec"].check(
                f"{where}: {where_key}.bandwidth_gb_per_s", level["bandwidth_gb_per_s"], 1e9, True)
        if level["name"] == names[-1] and "capacity_bytes" in changes:
            outer = changes.pop("capacity_bytes")
        if changes:
            try:
                spec = spec.with_memory(level["name"], **changes)
            except WorkbenchError as exc:
                raise WorkbenchError(f"{where}: {where_key}: {exc}") from None
    return spec, outer


def parse_peaks(where: str, key: str, table: dict) -> dict[str, float]:
    """A [[devices]] entry's peak table (dtype = rate in the declared unit) in op/s, each rate range-checked."""
    spec = DeviceSpec.__dataclass_fields__["peak_flops"].metadata["spec"]
    [(toml_key, scale, unit)] = spec.toml
    peaks = table[toml_key]
    if not isinstance(peaks, dict) or not peaks:
        raise WorkbenchError(f"{where}: {key}.{toml_key} must be a table of dtype = {unit} ({', '.join(DTYPES)})")
    for dtype in peaks:
        if dtype not in DTYPES:  # TOML keys are always strings
            raise WorkbenchError(f"{where}: unknown dtype {key}.{toml_key}.{dtype}; allowed: {', '.join(DTYPES)}")
    return {d: spec.check(f"{where}: {key}.{toml_key}.{d}", v, scale, True) for d, v in peaks.items()}




def parse_scheme_options(where: str, table, n_devices: int | None = None) -> tuple:
    """The [schemes] table's option sections (`workbench.schemes.options.parse_schemes`), checked against a
    cluster of `n_devices` when given (a tensor_split needs one number per device)."""
    from workbench.schemes.options import check_cluster, parse_schemes

    options = parse_schemes(where, table)
    return options if n_devices is None else check_cluster(where, options, n_devices)


def parse_network(where: str, table: dict, n_devices: int) -> Topology:
    """The [network] table: topology kind, one link class (bandwidth, per-hop latency, per-message time); with
    `link_class` (ethernet_1g ...) the class's cited defaults (data/constants/links.toml), each key overriding."""
    table = _table(where, "network", table, NETWORK_KEYS, ("topology",))
    kind = table["topology"]
    if not isinstance(kind, str) or kind not in TOPOLOGY_KINDS:
        raise WorkbenchError(f"{where}: network.topology must be one of {', '.join(TOPOLOGY_KINDS)}, got {kind!r}")
    base = None
    if "link_class" in table:
        if table["link_class"] not in LINK_CLASSES:
            raise WorkbenchError(f"{where}: network.link_class must be one of {', '.join(LINK_CLASSES)}, "
                                 f"got {table['link_class']!r}")
        base = link_class(table["link_class"])
    elif "bandwidth_mbps" not in table:
        raise WorkbenchError(f"{where}: missing key network.bandwidth_mbps (or network.link_class: one of "
                             f"{', '.join(LINK_CLASSES)})")
    bandwidth = _number(where, "network.bandwidth_mbps", table["bandwidth_mbps"]) if "bandwidth_mbps" in table \
        else base.bandwidth_bytes_per_s  # each in SI
    latency = _number(where, "network.latency_ms", table["latency_ms"]) if "latency_ms" in table \
        else (base.latency_s if base else 0.0)
    group = _integer(where, "network.group_size", table.get("group_size", 4))
    overhead = _number(where, "network.message_overhead_us", table["message_overhead_us"]) \
        if "message_overhead_us" in table else (base.message_overhead_s if base else 0.0)
    name = f"{table['bandwidth_mbps']:g} Mbps" if "bandwidth_mbps" in table else base.name
    link = Link(bandwidth, latency, name=name, message_overhead_s=overhead)
    return Topology(kind, n_devices, link, group_size=group)


def parse_speculative(where: str, table: dict, cluster: Cluster, base_dir: Path | None) -> Speculation:
    """The [speculative] table: draft, placement, gamma and alpha (or accepted_lengths), each checked in one line."""
    table = _table(where, "speculative", table, SPECULATIVE_KEYS)
    draft, draft_config = parse_draft(where, table, base_dir)
    values = {"draft_config": draft_config} if draft_config is not None else {}
    values |= {"gamma": SPECULATIVE_FIELDS["gamma"].check(f"{where}: speculative.gamma", table["gamma"])} \
        if "gamma" in table else {}
    if "alpha" in table:
        values["alpha"] = float(SPECULATIVE_FIELDS["alpha"].check(f"{where}: speculative.alpha", table["alpha"]))
    if "accepted_lengths" in table:
        lengths = table["accepted_lengths"]
        if not isinstance(lengths, list) or not all(is_number(p) for p in lengths):
            raise WorkbenchError(f"{where}: speculative.accepted_lengths must be a list of probabilities, got {lengths!r}")
        try:
            check_lengths(lengths)
        except WorkbenchError as exc:
            raise WorkbenchError(f"{where}: speculative.{exc}") from None
        values["accepted_lengths"] = tuple(lengths)
    if ("alpha" in values) == ("accepted_lengths" in values):
        raise WorkbenchError(f"{where}: [speculative] needs exactly one of alpha and accepted_lengths")
    placement = _text(where, "speculative.placement", table.get("placement", "root"))
    if placement == "own":
        if "draft_device" not in table:
            raise WorkbenchError(f"{where}: speculative.placement = \"own\" needs speculative.draft_device")
        values["device"] = load_preset(where, "speculative", _text(where, "speculative.draft_device",
                                                                    table["draft_device"]), base_dir, "draft_device")
        values["link"] = cluster.topology.link
    try:
        return Speculation(draft, placement, **values)
    except WorkbenchError as exc:
        raise _in_speculative(where, exc) from None


def parse_draft(where: str, table: dict, base_dir: Path | None) -> tuple[str, TransformerConfig | None]:
    """[speculative] draft (a registered name or "ngram") or draft_file (its GGUF or config.json, read like [model]
    file): the draft's name and, from a file, its config; exactly one of the two keys."""
    if ("draft" in table) == ("draft_file" in table):
        raise WorkbenchError(f"{where}: [speculative] needs exactly one of speculative.draft and speculative.draft_file")
    if "draft" in table:
        return _text(where, "speculative.draft", table["draft"]), None
    draft = read_model_file(resolve_path(table["draft_file"], base_dir, "speculative.draft_file", where)).config()
    return draft.name, draft


def _in_speculative(where: str, exc: WorkbenchError) -> WorkbenchError:
    """`exc` naming the file and the [speculative] table ('infeasible: ' kept first)."""
    text = str(exc)
    if text.startswith("infeasible: "):
        return type(exc)(f"infeasible: {where}: [speculative] {text.removeprefix('infeasible: ')}")
    return type(exc)(f"{where}: [speculative] {text}")


def check_fits(model: TransformerConfig, cluster: Cluster, weight_bits: float, where: str = "config") -> None:
    """Raise InfeasibleError when no scheme could hold the model: one block must fit on some device,
    and the whole model must fit in the devices' memory together unless a device can stream from storage."""
    capacities = [d.memory_bytes for d in cluster.devices]
    block = model.block_weight_bytes(weight_bits)
    if block > max(capacities):
        raise InfeasibleError(
            f"infeasible: {where}: one block of {model.name} is {block / MIB:.1f} MiB at {weight_bits:g} bit, "
            f"more than the largest device memory ({max(capacities) / MIB:.1f} MiB); it fits nowhere")
    total = model.weight_bytes(weight_bits)
    if total > sum(capacities) and not any(d.storage_read_bytes_per_s for d in cluster.devices):
        raise InfeasibleError(
            f"infeasible: {where}: {model.name} needs {total / GIB:.2f} GiB at {weight_bits:g} bit but the devices "
            f"hold {sum(capacities) / GIB:.2f} GiB together and none has storage_read_mb_per_s to stream from")


def parse_config(table: dict, where: str = "config", base_dir: Path | None = None) -> UserConfig:
    """Validate a parsed TOML document and build the deployment it describes (device-TOML presets are
    looked up relative to `base_dir`, the config file's folder)."""
    table = _table(where, "", table, TOP_KEYS, ("model", "network", "devices"))
    meta = _table(where, "meta", table.get("meta", {}), META_KEYS)
    model_table = expand_file(where, table["model"], base_dir)[0]
    model, weight_bits, activation_bits = parse_model(where, model_table)
    devices_table = table["devices"]
    if not isinstance(devices_table, list) or not devices_table:
        raise WorkbenchError(f"{where}: devices must be a non-empty list of [[devices]] tables")
    devices: list[DeviceSpec] = []
    for i, entry in enumerate(devices_table):
        spec, count = parse_device(where, i, entry, base_dir)
        devices += [spec] * count
    most = int(ENTRY_FIELDS["count"].high)
    if len(devices) > most:
        raise WorkbenchError(f"{where}: at most {most} devices in total, got {len(devices)}")
    topology = parse_network(where, table["network"], len(devices))
    cluster_table = _table(where, "cluster", table.get("cluster", {}), CLUSTER_KEYS)
    shared = None
    if "shared_machine" in cluster_table:
        shared = load_preset(where, "cluster", _text(where, "cluster.shared_machine", cluster_table["shared_machine"]),
                             base_dir, "shared_machine")
    cluster = Cluster(tuple(devices), topology, shared)
    work_table = _table(where, "workload", table.get("workload", {}), WORKLOAD_KEYS)
    seq_len = _integer(where, "workload.seq_len", work_table.get("seq_len", 128))
    kv_len = _integer(where, "workload.kv_len", work_table.get("kv_len", seq_len))
    for key, value in (("seq_len", seq_len), ("kv_len", kv_len)):
        if value > model.max_positions:
            raise WorkbenchError(f"{where}: workload.{key} must be <= the model's max_positions "
                                 f"({model.max_positions}), got {value}")
    routing = parse_routing(where, work_table, base_dir, model)
    expert_cache = parse_expert_cache(where, work_table, model)
    engine = parse_engine(where, work_table, table["model"].get("weight_format", ""))
    check_fits(model, cluster, weight_bits, where)
    name = _text(where, "meta.name", meta.get("name", Path(where).stem))
    kv_bits = _bits(where, model_table, "kv", None)
    workload = Workload(phase="decode", seq_len=seq_len, kv_len=kv_len, weight_bits=weight_bits,
                        activation_bits=activation_bits, kv_bits=kv_bits, routing=routing, expert_cache=expert_cache,
                        engine=engine, weight_format=model_table.get("weight_format", ""))
    config = UserConfig(name, model, cluster, workload, where, model_table.get("activation_format", ""),
                        model_table.get("kv_format", ""),
                        scheme_options=parse_scheme_options(where, table.get("schemes", {}), cluster.n))
    if "speculative" not in table:
        return config
    speculation = parse_speculative(where, table["speculative"], cluster, base_dir)
    try:
        check_draft(speculation, model, cluster, config.workload("decode"))
    except WorkbenchError as exc:
        raise _in_speculative(where, exc) from None
    return replace(config, speculation=speculation)


def parse_engine(where: str, workload: dict, weight_format: str) -> str:
    """[workload] engine: "" or an engine name (its kernels cost the generic schemes), which needs a weight_format."""
    engine = workload.get("engine", "")
    if engine not in ("", *ENGINE_NAMES):
        raise WorkbenchError(f"{where}: workload.engine must be one of {', '.join(ENGINE_NAMES)}, got {engine!r}")
    if engine and not weight_format:
        raise WorkbenchError(f"{where}: workload.engine = {engine!r} runs its kernels by format: give "
                             "model.weight_format (q4_0, q4_k, Q4_K_M, ...), not weight_bits alone")
    return engine


def parse_expert_cache(where: str, workload: dict, model: TransformerConfig) -> ExpertCache | None:
    """The [workload] expert-cache keys (None when none is given), checked against the model's experts, one line
    when bad (a cache larger than the model, a dense model with a cache, an unknown policy)."""
    if not any(key in workload for key in CACHE_FIELDS):
        return None
    if not model.is_moe:
        raise WorkbenchError(f"{where}: workload.cache_experts, cache_policy and expert_reads apply to a mixture of "
                             f"experts; {model.name} is dense (n_experts = 0)")
    experts = workload.get("cache_experts", model.n_experts)
    try:
        check_cache(experts, model.n_experts)
    except WorkbenchError as exc:
        raise WorkbenchError(f"{where}: workload.{exc}") from None
    policy = _choice(where, "workload.cache_policy", workload.get("cache_policy", "pinned"), CACHE_POLICIES)
    reads = _choice(where, "workload.expert_reads", workload.get("expert_reads", "routed"), EXPERT_READS)
    return ExpertCache(experts, policy, reads)


def _choice(where: str, key: str, value, allowed: tuple[str, ...]) -> str:
    """`value` if it is one of `allowed`, else one line naming the key and the allowed values."""
    if not isinstance(value, str) or value not in allowed:
        raise WorkbenchError(f"{where}: {key} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def _skew(where: str, value) -> float | tuple[float, ...]:
    """workload.routing_skew: one number or a list of numbers, each in the declared range (<= 8 in a file)."""
    field = ROUTING_FIELDS["routing_skew"]
    if isinstance(value, list):
        if not value:
            raise WorkbenchError(f"{where}: workload.routing_skew must be one number or a list of numbers (one per "
                                 "MoE layer), got []")
        return tuple(field.check(f"{where}: workload.routing_skew[{i}]", v) for i, v in enumerate(value))
    return field.check(f"{where}: workload.routing_skew", value)


def _trace_file(where: str, trace, base_dir: Path | None) -> str:
    """workload.routing_trace as a path that exists: relative to the deployment file, else a name under
    data/routing/ or a path; a missing file is one line naming the key and the path (not a later 'nothing fits')."""
    if not isinstance(trace, str) or not trace.strip():
        raise WorkbenchError(f"{where}: workload.routing_trace must be a CSV name or path, got {trace!r}")
    beside = Path(base_dir) / trace if base_dir is not None else None
    if beside is not None and beside.is_file():
        return str(beside)
    if trace_path(trace).is_file():
        return trace
    looked = f"{str(beside)!r}, " if beside is not None else ""
    raise WorkbenchError(f"{where}: workload.routing_trace file {trace!r} does not exist (looked for {looked}"
                         f"{str(TRACE_DIR / trace)!r} and {trace!r}); give a CSV under data/routing/ or a path "
                         "relative to the deployment file")


def parse_routing(where: str, workload: dict, base_dir: Path | None, model: TransformerConfig | None = None) -> Routing:
    """The [workload] routing keys (a MoE model's routing model; uniform when none is given), one line when bad:
    a skew only with routing = "skewed" and a trace only with "trace", a skew list or trace with one entry per
    MoE layer of `model`; a trace path is read relative to the deployment file."""
    kind = _choice(where, "workload.routing", workload.get("routing", "uniform"), ROUTING_KINDS)
    for key, needs in (("routing_skew", "skewed"), ("routing_trace", "trace")):
        if key in workload and kind != needs:
            raise WorkbenchError(f"{where}: workload.{key} applies only with workload.routing = \"{needs}\" (the file "
                                 f"says routing = \"{kind}\"); allowed: routing = \"{needs}\" with {key}, or no {key}")
    skew = _skew(where, workload.get("routing_skew", 0.0))
    locality = ROUTING_FIELDS["routing_locality"].check(f"{where}: workload.routing_locality",
                                                        workload.get("routing_locality", 0.0))
    trace = _trace_file(where, workload["routing_trace"], base_dir) if "routing_trace" in workload else ""
    try:
        routing = Routing(kind, skew, locality, trace)
        return routing.check(model.moe_layers, model.n_experts) if model is not None and model.is_moe else routing
    except WorkbenchError as exc:
        text = str(exc)
        raise WorkbenchError(f"{where}: workload.{text}" if text.startswith("routing")
                             else f"{where}: workload.routing_trace {trace!r}: {text}") from None


def load_config(path: str | Path) -> UserConfig:
    """Load and validate a deployment TOML file."""
    path = Path(path)
    return parse_config(read_document(path), path.name, path.parent)


def config_from_text(text: str, where: str = "config") -> UserConfig:
    """Parse a deployment from TOML text (tests, the explorer's text box)."""
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise WorkbenchError(f"{where}: not valid TOML: {exc}") from None
    return parse_config(table, where)



def read_document(path: str | Path) -> dict:
    """A deployment TOML file as a parsed document (not yet validated)."""
    path = Path(path)
    if not path.is_file():
        kind = "is a folder" if path.is_dir() else "does not exist"
        raise WorkbenchError(f"config file {str(path)!r} {kind}; give a .toml file")
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise WorkbenchError(f"{path.name}: not valid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise WorkbenchError(f"{path.name}: not valid UTF-8 text: {exc}") from None



def missing_sources(table: dict, prefix: str = "") -> list[str]:
    """Numeric keys of a parsed TOML document that no `sources` entry cites (for shipped examples)."""
    missing = []
    cited = table.get("sources", {}) if isinstance(table, dict) else {}
    for key, value in table.items():
        path = f"{prefix}{key}"
        if key == "sources":
            continue
        if isinstance(value, dict):
            if key not in cited:  # a cited table (e.g. peak_gflops) covers all its numbers
                missing += missing_sources(value, f"{path}.")
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, dict):
                    missing += missing_sources(item, f"{path}[{i}].")
        elif isinstance(value, int | float) and not isinstance(value, bool) and key not in cited:
            missing.append(path)
    return missing
