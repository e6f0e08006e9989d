"""Deployment TOML files: the examples load with every constant cited; bad files give one-line errors
naming the key and the range; random configs never raise anything but WorkbenchError."""

from __future__ import annotations

import copy
import tomllib
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench.core.errors import InfeasibleError, WorkbenchError
from workbench.core.io import REPO_ROOT
from workbench.machine.hardware import device_names
from workbench.scenarios.userconfig import (
    WEIGHT_FORMATS,
    config_from_text,
    load_config,
    missing_sources,
    parse_config,
)

EXAMPLES = sorted((REPO_ROOT / "examples").glob("*.toml"))
GIB = 2**30


def example_table(stem: str = "sbc_gigabit") -> dict:
    with open(REPO_ROOT / "examples" / f"{stem}.toml", "rb") as f:
        return tomllib.load(f)


def one_line_error(table: dict, *fragments: str, error=WorkbenchError) -> str:
    with pytest.raises(error) as info:
        parse_config(table, "x.toml")
    message = str(info.value)
    assert "\n" not in message, message
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_three_examples_ship():
    assert {p.stem for p in EXAMPLES} >= {"sbc_gigabit", "laptops_wifi", "smart_home"}


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_examples_load_and_cite_every_constant(path):
    config = load_config(path)
    assert config.cluster.n >= 2 and config.model.name
    with open(path, "rb") as f:
        assert missing_sources(tomllib.load(f)) == []


def test_sbc_example_values_are_converted_to_si_units():
    config = load_config(REPO_ROOT / "examples" / "sbc_gigabit.toml")
    pi = config.cluster.devices[0]
    assert config.cluster.n == 4 and config.weight_bits == 4.5
    assert pi.peak("fp16") == pytest.approx(307.2e9)
    assert pi.memory_level("DRAM").capacity_bytes == 7 * GIB
    assert pi.memory_level("DRAM").bandwidth_bytes_per_s == pytest.approx(17.1e9)
    assert pi.memory_level("LLC").capacity_bytes == 2 * 2**20
    assert pi.storage_read_bytes_per_s == pytest.approx(90e6)
    link = config.cluster.topology.link
    assert link.bandwidth_bytes_per_s == pytest.approx(125e6) and link.latency_s == pytest.approx(50e-6)
    assert config.workload("decode").kv_len == 128


def test_missing_sources_finds_an_uncited_number():
    table = example_table()
    del table["devices"][0]["sources"]["efficiency_gemv"]
    assert missing_sources(table) == ["devices[0].efficiency_gemv"]


def test_missing_key_names_it():
    table = example_table()
    del table["network"]["bandwidth_mbps"]
    one_line_error(table, "missing key network.bandwidth_mbps")
    table = example_table()
    del table["devices"][0]["memory"][1]["bandwidth_gb_per_s"]
    one_line_error(table, "devices[0].memory[1].bandwidth_gb_per_s")


@pytest.mark.parametrize("where, key, value, fragment", [
    ("network", "bandwidth_mbps", -5, "network.bandwidth_mbps must be a number > 0"),
    ("network", "latency_ms", -1, "network.latency_ms must be a number >= 0"),
    ("device", "efficiency_gemm", 1.5, "devices[0].efficiency_gemm must be a number > 0 and <= 1"),
    ("device", "storage_read_mb_per_s", 0, "devices[0].storage_read_mb_per_s must be a number > 0"),
    ("device", "count", 0, "devices[0].count must be an integer in [1, 1024]"),
    ("device", "peak_gflops", {"fp16": -1.0}, "devices[0].peak_gflops.fp16 must be a number > 0"),
    ("device", "peak_gflops", {"fp8": 1.0}, "unknown dtype devices[0].peak_gflops.fp8"),
    ("model", "weight_bits", 0.5, "model.weight_bits must be a number > 0 and <= 32 (at least 1)"),
    ("model", "name", "GPT-5", "model.name must be a registered model"),
    ("network", "topology", "mesh", "network.topology must be one of"),
    ("network", "bandwith_mbps", 100, "unknown key network.bandwith_mbps"),
])
def test_bad_values_name_the_key_and_range(where, key, value, fragment):
    table = example_table()
    target = {"network": table["network"], "device": table["devices"][0], "model": table["model"]}[where]
    if where == "model" and key == "weight_bits":
        del target["weight_format"]
    target[key] = value
    one_line_error(table, fragment)


def test_negative_memory_bandwidth_names_the_level():
    table = example_table()
    table["devices"][0]["memory"][1]["bandwidth_gb_per_s"] = -17.1
    one_line_error(table, "devices[0].memory[1].bandwidth_gb_per_s", "> 0")


def test_a_model_that_fits_nowhere_is_infeasible():
    table = example_table()
    table["model"] = {"name": "Llama 2-70B", "weight_format": "fp32"}  # one block ~3.2 GiB
    for device in table["devices"]:
        device["memory"][1]["capacity_gib"] = 1
    one_line_error(table, "infeasible", "fits nowhere", "Llama 2-70B", error=InfeasibleError)


def test_too_big_without_storage_is_infeasible():
    table = example_table()
    table["model"] = {"name": "Llama 2-13B", "weight_format": "fp16"}  # 24 GiB > 4 x 7 GiB? no: 28 GiB
    table["devices"][0]["count"] = 2
    del table["devices"][0]["storage_read_mb_per_s"]
    one_line_error(table, "infeasible", "stream", error=InfeasibleError)


def test_weight_formats_include_4bit_block_formats():
    assert WEIGHT_FORMATS["q4_0"] == 4.5 and WEIGHT_FORMATS["q4_1"] == 5.0 and WEIGHT_FORMATS["q8_0"] == 8.5
    table = example_table()
    table["model"]["weight_bits"] = 4.5
    one_line_error(table, "not both")


def test_model_by_dimensions():
    table = example_table()
    table["model"] = {"name": "my-llama", "family": "llama", "n_layers": 4, "d_model": 256, "n_heads": 8,
                      "n_kv_heads": 2, "d_ff": 512, "vocab_size": 1000, "weight_bits": 8}
    config = parse_config(table, "x.toml")
    assert config.model.name == "my-llama" and config.model.n_kv_heads == 2 and config.weight_bits == 8
    del table["model"]["d_ff"]
    one_line_error(table, "missing key model.d_ff")
    table["model"]["d_ff"] = 512
    table["model"]["n_heads"] = 7  # 256 not divisible by 7
    one_line_error(table, "model:", "n_heads")


def test_sequence_longer_than_the_model_allows():
    table = example_table()
    table["workload"]["seq_len"] = 10**6
    one_line_error(table, "workload.seq_len must be <= the model's max_positions")


def test_devices_from_presets():
    table = example_table()
    preset = device_names()[0]
    table["devices"] = [{"preset": preset, "count": 2}]
    table["model"] = {"name": "TinyLlama-42M", "weight_bits": 8}
    config = parse_config(table, "x.toml")
    assert config.cluster.n == 2
    table["devices"][0]["efficiency_gemm"] = 0.5  # a tuning key may refine a preset (calibrate writes these)
    assert parse_config(table, "x.toml").cluster.devices[0].efficiency_gemm == 0.5
    table["devices"][0]["peak_gflops"] = {"fp16": 10.0}  # but the device itself comes from the preset
    one_line_error(table, "uses preset")


def test_bad_toml_text_and_missing_file():
    with pytest.raises(WorkbenchError, match="not valid TOML"):
        config_from_text("[network\nbandwidth_mbps = 1", "x.toml")
    with pytest.raises(WorkbenchError, match="does not exist"):
        load_config(REPO_ROOT / "examples" / "nope.toml")


# ---- random configs -------------------------------------------------------------------------------
numbers = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=64), st.integers(-10, 10**7),
                    st.booleans(), st.text(max_size=3), st.none())
positive = st.floats(1e-3, 1e4, allow_nan=False)


@st.composite
def mutated_configs(draw):
    """An example with a few values replaced by anything (wrong types, NaN, negatives, huge)."""
    table = copy.deepcopy(example_table(draw(st.sampled_from(["sbc_gigabit", "laptops_wifi", "smart_home"]))))
    paths = [("network", "bandwidth_mbps"), ("network", "latency_ms"), ("network", "topology"),
             ("network", "group_size"), ("workload", "seq_len"), ("workload", "kv_len"), ("model", "name"),
             ("model", "activation_bits"), ("devices", 0, "count"), ("devices", 0, "efficiency_gemm"),
             ("devices", 0, "storage_read_mb_per_s"), ("devices", 0, "memory", 0, "capacity_mib"),
             ("devices", 0, "memory", 1, "capacity_gib"), ("devices", 0, "memory", 1, "bandwidth_gb_per_s"),
             ("devices", 0, "peak_gflops")]
    for path in draw(st.lists(st.sampled_from(paths), min_size=1, max_size=3)):
        node = table
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = draw(st.one_of(numbers, st.dictionaries(st.sampled_from(["fp16", "int8", "xx"]), numbers,
                                                                 max_size=2)))
    return table


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_configs())
def test_mutated_configs_raise_only_workbench_errors(table):
    try:
        parse_config(table, "random.toml")
    except WorkbenchError as exc:
        assert "\n" not in str(exc)


@st.composite
def valid_configs(draw):
    """A valid deployment: 1-8 devices of 1-2 kinds with random peaks, memories, links, models."""
    kinds = []
    for i in range(draw(st.integers(1, 2))):
        inner_mib = draw(st.floats(0.25, 16))
        kinds.append({
            "name": f"dev{i}", "count": draw(st.integers(1, 4)),
            "peak_gflops": {"fp16": draw(st.floats(1, 5e4)), "int8": draw(st.floats(1, 1e5))},
            "efficiency_gemm": draw(st.floats(0.05, 1)), "efficiency_gemv": draw(st.floats(0.05, 1)),
            "storage_read_mb_per_s": draw(st.floats(10, 5e3)),
            "device_class": draw(st.sampled_from(["cpu", "gpu"])),  # no memory_efficiency: the class's typical
            "memory": [{"name": "LLC", "capacity_mib": inner_mib, "bandwidth_gb_per_s": draw(st.floats(1, 1e3))},
                       {"name": "DRAM", "capacity_gib": draw(st.floats(0.5, 64)),
                        "bandwidth_gb_per_s": draw(st.floats(0.5, 500))}]})
    model = draw(st.sampled_from(["TinyLlama-42M", "DistilBERT", "BERT-base", "GPT2-L", "Llama 2-7B", "OPT-L"]))
    seq = draw(st.integers(1, 512))
    return {"model": {"name": model, "weight_format": draw(st.sampled_from(sorted(WEIGHT_FORMATS)))},
            "workload": {"seq_len": seq, "kv_len": draw(st.integers(1, 512))},
            "network": {"topology": draw(st.sampled_from(["switch", "gateway_tree", "direct", "ring"])),
                        "bandwidth_mbps": draw(positive), "latency_ms": draw(st.floats(0, 50))},
            "devices": kinds}


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(valid_configs())
def test_random_valid_configs_run_in_the_arena_raising_only_workbench_errors(table):
    from workbench.scenarios.arena import arena_for_config

    try:
        config = parse_config(table, "random.toml")
    except InfeasibleError:
        return
    arena = arena_for_config(config)  # a scheme may refuse (n/a); any other exception fails the test
    try:
        arena.check_feasible()
    except InfeasibleError as exc:
        assert "nothing fits" in str(exc)
    assert len(arena.table()) == 2 * len(arena.entries) // 2


def test_fixed_cost_keys_reach_the_device_and_the_link():
    from workbench.scenarios.userconfig import config_from_text

    text = """
[model]
name = "Llama 2-7B"
weight_format = "q4_0"
[network]
topology = "switch"
bandwidth_mbps = 1000
message_overhead_us = 80
[[devices]]
name = "board"
count = 2
peak_gflops = { fp16 = 100 }
memory_efficiency = 0.7
kernel_launch_us = 12
layer_overhead_us = 150
[[devices.memory]]
name = "DRAM"
capacity_gib = 8
bandwidth_gb_per_s = 17
"""
    cfg = config_from_text(text, "t.toml")
    dev = cfg.cluster.devices[0]
    assert (dev.memory_efficiency, dev.kernel_launch_s, dev.layer_overhead_s) == pytest.approx((0.7, 12e-6, 150e-6))
    assert cfg.cluster.topology.link.message_overhead_s == pytest.approx(80e-6)
    for bad, key in (("memory_efficiency = 0.7", "memory_efficiency = 1.5"),
                     ("kernel_launch_us = 12", "kernel_launch_us = -1"),
                     ("message_overhead_us = 80", "message_overhead_us = -3")):
        with pytest.raises(WorkbenchError, match=key.split(" =")[0]):
            config_from_text(text.replace(bad, key), "t.toml")


def test_a_device_file_is_shared_between_configs_by_path(tmp_path):
    from workbench.scenarios.userconfig import load_config

    board = (REPO_ROOT / "data" / "devices" / "hepti_rpi4.toml").read_text()
    (tmp_path / "boards").mkdir()
    (tmp_path / "boards" / "pi.toml").write_text(board)
    config = """
[model]
name = "llama 2 7b"
weight_format = "q4_0"
[network]
topology = "switch"
bandwidth_mbps = 1000
[[devices]]
preset = "boards/pi.toml"
count = 4
"""
    (tmp_path / "a.toml").write_text(config)
    cfg = load_config(tmp_path / "a.toml")
    assert cfg.cluster.n == 4 and cfg.model.name == "Llama 2-7B"
    (tmp_path / "b.toml").write_text(config.replace("boards/pi.toml", "boards/missing.toml"))
    with pytest.raises(WorkbenchError, match=r"devices\[0\]\.preset file .*missing\.toml.* does not exist"):
        load_config(tmp_path / "b.toml")


def test_a_device_error_names_the_file_once():
    from workbench.scenarios.userconfig import config_from_text

    text = """
[model]
name = "Llama 2-7B"
[network]
topology = "switch"
bandwidth_mbps = 1000
[[devices]]
name = "x"
peak_gflops = { fp16 = 100 }
efficiency_gemm = 1.5
[[devices.memory]]
name = "DRAM"
capacity_gib = 64
bandwidth_gb_per_s = 17
"""
    with pytest.raises(WorkbenchError) as err:
        config_from_text(text, "t.toml")
    assert str(err.value).count("t.toml") == 1 and "efficiency_gemm" in str(err.value)


def test_activation_and_kv_formats_are_separate_from_the_weight_format():
    from workbench.scenarios.userconfig import config_from_text
    from workbench.schemes import common

    base = (REPO_ROOT / "examples" / "sbc_gigabit.toml").read_text()
    text = base.replace('weight_format = "q4_0"', 'weight_format = "q4_0"\nactivation_format = "q8_0"\nkv_format = "fp16"')
    text = text.replace("activation_bits = 16\n", "")
    cfg = config_from_text(text, "t.toml")
    wl = cfg.workload("decode")
    assert (wl.weight_bits, wl.activation_bits, wl.cache_bits) == (4.5, 8.5, 16.0)
    pi = cfg.cluster.devices[0]
    assert common.workload_dtype(pi, wl) == "int8"  # q4_0 x q8_0: int8 dot products, the device's int8 peak
    plain = common.kv_read_bytes(cfg.model, wl, cfg.model.n_heads)
    narrow = common.kv_read_bytes(cfg.model, replace(wl, kv_bits=8.5), cfg.model.n_heads)
    assert float(plain) == pytest.approx(float(narrow) * 16 / 8.5)
    with pytest.raises(WorkbenchError, match="activation_bits or model.activation_format"):
        config_from_text(text.replace('activation_format = "q8_0"', 'activation_format = "q8_0"\nactivation_bits = 8'),
                         "t.toml")


def test_a_registered_model_with_an_override():
    base = (REPO_ROOT / "examples" / "sbc_gigabit.toml").read_text()
    from workbench.scenarios.userconfig import config_from_text

    cfg = config_from_text(base.replace('name = "Llama 2-13B"', 'name = "Llama 2-13B"\nn_layers = 20'), "t.toml")
    assert cfg.model.n_layers == 20 and cfg.model.d_model == 5120
    with pytest.raises(WorkbenchError, match=r"model\.n_layers must be an integer in \[1, 1000\]"):
        config_from_text(base.replace('name = "Llama 2-13B"', 'name = "Llama 2-13B"\nn_layers = 0'), "t.toml")


@pytest.mark.parametrize("old,new,match", [
    ("fp16 = 307.2", "fp16 = 1e-320", r"peak_gflops\.fp16 must be a number > 0 and <= 1e\+07 \(at least 1e-06\)"),
    ("bandwidth_mbps = 1000", "bandwidth_mbps = 1e-300", r"bandwidth_mbps must be .*\(at least 0\.001\)"),
])
def test_denormal_rates_are_refused_not_turned_into_inf(old, new, match):
    from workbench.scenarios.userconfig import config_from_text

    base = (REPO_ROOT / "examples" / "sbc_gigabit.toml").read_text()
    assert old in base
    with pytest.raises(WorkbenchError, match=match):
        config_from_text(base.replace(old, new), "t.toml")


def test_a_folder_given_as_the_config_says_so(tmp_path):
    with pytest.raises(WorkbenchError, match="is a folder"):
        load_config(tmp_path)


def test_a_device_without_a_wide_enough_rate_is_not_given_a_narrower_one():
    """Fail closed: a board listing only an int8 peak has no fp32 or fp16 rate; STI (fp32 arithmetic) is n/a
    with a one-line reason naming the device, instead of running at the int8 rate."""
    from workbench.scenarios.arena import arena_for_config

    base = (REPO_ROOT / "examples" / "sbc_gigabit.toml").read_text()
    old = "peak_gflops = { fp32 = 153.6, fp16 = 307.2, int8 = 614.4 }"
    assert old in base
    config = config_from_text(base.replace(old, "peak_gflops = { int8 = 614.4 }"), "t.toml")
    entries = {e.scheme: e for e in arena_for_config(config, phases=("decode",)).entries}
    sti = entries["single_device_streamed"]
    assert sti.status == "n/a" and "has no rate for fp32 work" in sti.error and "\n" not in sti.error


@pytest.mark.parametrize("key", ["name", "peak_gflops", "memory"])
def test_a_device_missing_a_required_key_names_it(key):
    table = example_table()
    del table["devices"][0][key]
    one_line_error(table, f"missing key devices[0].{key}")


@pytest.mark.parametrize("keys", [(), ("capacity_gib", "capacity_mib")])
def test_a_memory_level_needs_exactly_one_capacity_unit(keys):
    table = example_table()
    level = table["devices"][0]["memory"][1]
    for unit in ("capacity_kib", "capacity_mib", "capacity_gib"):
        level.pop(unit, None)
    level.update({unit: 1 for unit in keys})
    one_line_error(table, "devices[0].memory[1] needs exactly one of capacity_kib, capacity_mib, capacity_gib")


# ---- the [workload] MoE keys, presets and schemes options: refused in one line naming the key ---------------------
def moe_table(**workload) -> dict:
    """examples/qwen3_moe_pi5.toml (48 MoE layers of 128 experts) with `workload` keys added."""
    table = example_table("qwen3_moe_pi5")
    table["workload"].update(workload)
    return table


@pytest.mark.parametrize("skew", [9, 100, 8.5])
def test_a_routing_skew_above_the_documented_8_is_refused(skew):
    one_line_error(moe_table(routing="skewed", routing_skew=skew),
                   "x.toml: workload.routing_skew must be a number >= 0 and <= 8", f"got {skew}")
    assert parse_config(moe_table(routing="skewed", routing_skew=8), "x.toml").routing.skew == 8


@pytest.mark.parametrize("routing", [None, "uniform", "trace"])
def test_a_skew_without_skewed_routing_is_refused(routing):
    extra = {} if routing is None else {"routing": routing}
    if routing == "trace":
        extra["routing_trace"] = "synthetic_8x2_4layers.csv"
    one_line_error(moe_table(routing_skew=1.0, **extra),
                   'workload.routing_skew applies only with workload.routing = "skewed"')


def test_a_trace_without_trace_routing_is_refused():
    one_line_error(moe_table(routing_trace="synthetic_8x2_4layers.csv"),
                   'workload.routing_trace applies only with workload.routing = "trace"')


def test_a_per_layer_skew_list_needs_one_entry_per_moe_layer():
    one_line_error(moe_table(routing="skewed", routing_skew=[0.5, 1.0]),
                   "workload.routing_skew must be one number or a list of 48", "got a list of 2")
    one_line_error(moe_table(routing="skewed", routing_skew=[0.5] * 47 + [9]), "workload.routing_skew[47] must be")
    config = parse_config(moe_table(routing="skewed", routing_skew=[0.5] * 48), "x.toml")
    assert config.routing.skew == (0.5,) * 48


def mixtral_trace_table(n_layers: int) -> dict:
    """A Mixtral-8x7B (8 experts, 2 active) of `n_layers` layers routed by the 4-layer synthetic trace."""
    table = moe_table(routing="trace", routing_trace="synthetic_8x2_4layers.csv")
    table["model"] = {"name": "Mixtral-8x7B", "n_layers": n_layers, "weight_format": "q4_0"}
    table["devices"][0]["count"] = 8
    return table


def test_a_trace_with_another_layer_count_than_the_model_is_refused():
    one_line_error(mixtral_trace_table(32), "workload.routing_trace synthetic_8x2_4layers.csv must give 32 layers",
                   "got 4 layers of 8")
    assert parse_config(mixtral_trace_table(4), "x.toml").routing.trace == "synthetic_8x2_4layers.csv"


def test_a_missing_trace_is_its_own_error_not_a_model_that_fits_nowhere():
    """On 8 boards the model fits: the missing file is the error, one line with the key and the path."""
    table = moe_table(routing="trace", routing_trace="no_such_trace.csv")
    table["devices"][0]["count"] = 8
    message = one_line_error(table, "x.toml: workload.routing_trace file 'no_such_trace.csv' does not exist")
    assert "infeasible" not in message and "nothing fits" not in message


def test_a_trace_beside_the_deployment_file_is_found(tmp_path):
    import shutil

    shutil.copy(REPO_ROOT / "data" / "routing" / "synthetic_8x2_4layers.csv", tmp_path / "mine.csv")
    table = mixtral_trace_table(4)
    table["workload"]["routing_trace"] = "mine.csv"
    assert parse_config(table, "x.toml", tmp_path).routing.trace == str(tmp_path / "mine.csv")


@pytest.mark.parametrize(("key", "value", "allowed"), [
    ("cache_policy", "fifo", "pinned, lru"), ("expert_reads", "all", "routed, prefetch"),
    ("routing", "zipf", "uniform, skewed, trace")])
def test_an_unknown_moe_choice_names_its_key_and_the_allowed_values(key, value, allowed):
    message = one_line_error(moe_table(**{key: value}), f"x.toml: workload.{key} must be one of {allowed}, "
                                                        f"got '{value}'")
    assert "workload.unknown" not in message


def test_an_unknown_preset_names_the_key_and_the_file():
    table = example_table()
    table["devices"][0] = {"preset": "edge_rpi9", "count": 4}
    one_line_error(table, "x.toml: devices[0].preset 'edge_rpi9' is not a device preset", "edge_rpi5_8gb")
    table = example_table()
    table["cluster"] = {"shared_machine": "no_such_machine"}
    one_line_error(table, "x.toml: cluster.shared_machine 'no_such_machine' is not a device preset")
