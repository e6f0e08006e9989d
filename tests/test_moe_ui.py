"""Mixtures of experts on the user's side: whatif, the explorer and the regime map take MoE models; whatif
--devices says why more devices stop helping; bad MoE input is one line naming the key and the allowed values."""

from __future__ import annotations

import argparse
import re

import pytest

from workbench.core.errors import WorkbenchError
from workbench.core.io import REPO_ROOT
from workbench.model import routing as routing_module
from workbench.model.models import MODELS, get_model
from workbench.scenarios.moe_advice import REASONS, MoeNumbers, moe_reason, partition_of, scheme_notes
from workbench.scenarios.userconfig import WORKLOAD_KEYS, config_from_text, load_config
from workbench.scenarios.whatif import add_arguments, main
from workbench.schemes.base import load_all

EXAMPLE = REPO_ROOT / "examples" / "qwen3_moe_pi5.toml"
MOE_MODELS = [name for name, m in MODELS.items() if m.is_moe]
HAS_ROUTING_KEYS = "routing_skew" in WORKLOAD_KEYS
HAS_CACHE_KEYS = "cache_experts" in WORKLOAD_KEYS


def whatif(capsys, *argv) -> str:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert main(parser.parse_args([str(EXAMPLE), "--no-charts", *argv])) == 0
    return capsys.readouterr().out


def example_text(workload: str = "", **model) -> str:
    """The Pi 5 example with [model] keys replaced and `workload` lines added to its [workload] table."""
    text = EXAMPLE.read_text()
    for key, value in model.items():
        text = re.sub(rf"^{key} = .*$", f"{key} = {value}", text, count=1, flags=re.M)
    return text.replace("[workload]\n", f"[workload]\n{workload}\n", 1)


def one_line_error(text: str) -> str:
    with pytest.raises(WorkbenchError) as caught:
        config_from_text(text)
    message = str(caught.value)
    assert "\n" not in message
    return message


# ---- whatif ----------------------------------------------------------------------------------------
def test_whatif_prints_moe_rows_for_the_pi5_example(capsys):
    out = whatif(capsys)
    assert "mixture of experts: 128 experts per layer, 8 routed per token; 3.35 B of 30.53 B parameters per token " \
        "(routing: uniform)" in out
    rows = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert re.search(r"\d+(\.\d+)? ms", rows["layerwise_mp"]) and "n/a" not in rows["layerwise_mp"]
    assert "costs a dense FFN, not a mixture of experts (Qwen3-30B-A3B, 128 experts): " in rows["hepti_ws"]
    assert re.search(r"\d+(\.\d+)? ms", rows["megatron_tp"]) and "n/a" not in rows["megatron_tp"]  # TP inside each expert
    assert re.search(r"best: prefill \w+ \(TTFT", out)


def test_whatif_devices_says_where_and_why_moe_stops_helping(capsys):
    out = whatif(capsys, "--devices", "1,2,4,8")
    tail = out.split("where more devices stop helping and why:")[1]
    assert "whole f32 router (48.0 MiB)" in tail  # 48 layers x 2048 x 128 x 4 B
    assert "the weights alone fill 3 devices' memory (a lower bound" in tail  # 15.99 GiB over 7 GiB boards
    assert "every expert resident from" not in tail  # not claimed from bytes alone (rows show OOM at 2-3 boards)
    assert re.search(r"layerwise_mp \(whole layers with all their experts\): fastest at 4 devices, not faster at 8;"
                     r" MoE: a token visits every layer in turn", tail)


def test_whatif_devices_of_a_dense_model_prints_no_moe_lines(capsys):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    main(parser.parse_args([str(REPO_ROOT / "examples" / "sbc_gigabit.toml"), "--no-charts", "--devices", "1,2"]))
    assert "where more devices stop helping and why" not in capsys.readouterr().out


# ---- moe_advice ------------------------------------------------------------------------------------
def test_moe_numbers_are_the_models_sizes():
    numbers = MoeNumbers(get_model("Qwen3-30B-A3B"), 4.5, 4, 8.5, 7 * 2**30)
    assert numbers.router_bytes == 48 * 2048 * 128 * 4
    experts = 48 * 8 * 3 * 2048 * 768 * 4.5 / 8
    assert numbers.experts_bytes() == pytest.approx(experts, rel=1e-12)
    assert numbers.router_wins() == -(-experts // numbers.router_bytes)
    assert numbers.sync_bytes() == 2 * 48 * 3 * 2048 * 8.5 / 8
    assert numbers.resident_at() == 3
    mixtral = MoeNumbers(get_model("Mixtral-8x7B"), 4.5, 2)
    assert mixtral.router_wins() > 1000  # 14336-wide experts dwarf an 8-way router


def test_every_reason_formats_and_names_its_partition():
    numbers = MoeNumbers(get_model("DeepSeek-V2-Lite"), 4.5, 8)
    for kind, reasons in REASONS.items():
        scheme = next(s for s, k in (("dllama_allgather_tp", "tp"), ("moe_layer_pipeline", "pipeline"),
                                     ("moe_expert_parallel", "expert")) if k == kind)
        assert partition_of(scheme) == kind
        for cause in reasons:
            assert "{" not in moe_reason(numbers, scheme, cause) != ""
    assert moe_reason(numbers, "megatron_tp", "oom").startswith("every device holds the replicated router")
    assert moe_reason(numbers, "galaxy_hmp", "memory_s") == ""  # no partition: no MoE reason


def test_scheme_notes_name_the_best_count_and_the_oom_reason():
    numbers = MoeNumbers(get_model("Qwen3-30B-A3B"), 4.5, 8)
    notes = scheme_notes(numbers, {"dllama_allgather_tp": (2, 4, "OOM"), "moe_layer_pipeline": (8, None, ""),
                                   "single_device_resident": (1, 2, "ok"),
                                   "moe_expert_parallel": (4, None, "", 8, "n/a: 8 does not divide the heads")})
    assert notes[0].startswith("dllama_allgather_tp (tensor parallel inside every expert): fastest at 2 devices, not "
                               "faster at 4; MoE: every device holds the replicated router")
    assert notes[1] == "moe_layer_pipeline (whole layers with all their experts): fastest at 8 devices, the largest " \
                       "count tried"
    assert notes[2] == "moe_expert_parallel (expert parallelism (all-to-all)): fastest at 4 devices; cannot split " \
                       "the model at 8: 8 does not divide the heads"
    assert len(notes) == 3


def test_stop_notes_add_the_moe_reason_to_each_stop_helping_cause():
    from types import SimpleNamespace as Stop

    from workbench.scenarios.moe_advice import stop_notes

    numbers = MoeNumbers(get_model("Qwen3-30B-A3B"), 4.5, 4, 8.5, 7 * 2**30)
    notes = stop_notes(numbers, [Stop(scheme="dllama_allgather_tp", cause="comm_bytes_s"),
                                 Stop(scheme="moe_layer_pipeline", cause="flat"), Stop(scheme="local", cause="oom")])
    assert notes == [
        "dllama_allgather_tp: MoE: each sync gathers n-1 partial sums of the full hidden size (2.1 KiB each), so a device "
        "receives 612.0 KiB per token at n devices while its share of the 8 experts shrinks",
        "moe_layer_pipeline: MoE: a token visits every layer in turn: more devices hold more experts, they do not "
        "shorten a step (all experts resident from 3 devices)"]


def test_moe_numbers_refuse_a_dense_model():
    with pytest.raises(WorkbenchError, match="Llama 2-7B is dense"):
        MoeNumbers(get_model("Llama 2-7B"), 4.5, 2)


# ---- bad input through the TOML path ------------------------------------------------------------------
def test_active_experts_above_experts_is_one_line():
    dims = "\nfamily = \"llama\"\nn_layers = 4\nd_model = 512\nn_heads = 8\nd_ff = 256\nvocab_size = 1000\n" \
           "n_experts = 8\nn_active_experts = 9"
    message = one_line_error(EXAMPLE.read_text().replace('name = "Qwen3-30B-A3B"', 'name = "my-moe"' + dims))
    assert "n_active_experts must be an integer in 1..8" in message and "got 9" in message


def test_an_unknown_weight_format_is_one_line_listing_the_allowed():
    message = one_line_error(example_text(weight_format='"Q4_K_X"'))
    assert "model.weight_format must be one of" in message and "q4_0" in message and "'Q4_K_X'" in message


def test_an_unknown_recipe_lists_the_recipes():
    message = one_line_error(example_text(weight_format='"Q4_K_X"'))
    assert "Q4_K_M" in message


def test_a_cache_larger_than_the_model_is_one_line():
    message = one_line_error(example_text("cache_experts = 200"))
    assert "cache_experts must be an integer in 0..128" in message and "200" in message


def test_bad_routing_values_are_one_line_each():
    assert "routing_skew must be" in one_line_error(example_text("routing = \"skewed\"\nrouting_skew = -1"))
    message = one_line_error(example_text("routing = \"zipf\""))
    assert "routing" in message and "uniform" in message and "skewed" in message


def test_a_device_count_the_engine_cannot_split_names_the_allowed(capsys):
    out = whatif(capsys, "--devices", "3")
    line = next(line for line in out.splitlines() if line.split()[:1] == ["dllama_allgather_tp"])
    assert "n/a" in line and re.search(r"1, 2(,| or| and) 4", line)


# ---- the [workload] routing keys flow into Workload.routing ---------------------------------------------------------
def test_moe_routing_keys_reach_the_workload():
    from workbench.scenarios.arena import arena_for_config
    from workbench.scenarios.regimes import Base

    config = config_from_text(example_text("routing = \"skewed\"\nrouting_skew = 1.2\nrouting_locality = 0.3"))
    assert (config.routing.kind, config.routing.skew, config.routing.locality) == ("skewed", 1.2, 0.3)
    arena = arena_for_config(config, schemes=["layerwise_mp"])
    assert all(w.routing == config.routing for w in arena.workloads)
    assert config.workload("decode").routing == config.routing
    assert Base.from_config(config).routing == config.routing


def test_a_file_without_routing_keys_routes_uniformly():
    from workbench.scenarios.arena import arena_for_config

    arena = arena_for_config(load_config(EXAMPLE), schemes=["layerwise_mp"])
    assert all(w.routing == routing_module.UNIFORM for w in arena.workloads)


# ---- the explorer and the regime map ---------------------------------------------------------------------
def test_explorer_lists_every_moe_model_and_shows_their_na_reasons():
    from workbench.scenarios.explore import compute, model_options, state_for_preset

    state = state_for_preset("qwen3_moe_pi5", phase="decode")
    assert {value for _, value in model_options(state.config)} >= set(MOE_MODELS) and len(MOE_MODELS) >= 6
    view = compute(state)
    assert any(n.startswith("hepti_ws: hepti_ws costs a dense FFN") for n in view.notes)
    assert view.summary.startswith("best time per token: ")
    olmoe = compute(state_for_preset("qwen3_moe_pi5", phase="decode", model="OLMoE-1B-7B"))
    assert olmoe.arena.model.name == "OLMoE-1B-7B" and "fit" in olmoe.summary


def test_moe_controls_follow_the_declared_fields():
    from workbench.scenarios.explore import MOE_CONTROLS, MOE_WIDGETS

    assert set(MOE_CONTROLS) <= set(WORKLOAD_KEYS) & set(MOE_WIDGETS)
    assert ("routing_skew" in MOE_CONTROLS) == HAS_ROUTING_KEYS  # hidden exactly when the key is absent
    assert HAS_CACHE_KEYS and "cache_experts" in MOE_CONTROLS  # the expert cache has its control
    assert "cache_policy" in MOE_CONTROLS


def test_explorer_routing_controls_move_the_workload():
    import ipywidgets  # noqa: F401  (the widget needs it)

    from workbench.scenarios.explore import Explorer, state_for_preset

    explorer = Explorer(state_for_preset("qwen3_moe_pi5", phase="decode"))
    explorer.controls["routing"].value = "skewed"
    explorer.controls["routing_skew"].value = 1.5
    assert explorer.view.arena.workloads[0].routing.skew == 1.5
    explorer.controls["model"].value = "Llama 2-7B"
    assert explorer.controls["routing_skew"].disabled


def test_regime_map_takes_a_moe_model():
    from workbench.scenarios.regimes import Base, moe_capable, sweep, winners

    registry = load_all()
    schemes = moe_capable(registry)
    assert {"layerwise_mp", "pipeline_offload", "megatron_tp"} <= set(schemes) and "hepti_ws" not in schemes
    base = Base.from_config(load_config(EXAMPLE))
    win = winners(sweep(base, {"n_devices": (2, 4), "memory_gib": (4, 8)}, ("decode",), schemes, registry))
    assert len(win) == 4 and set(win["winner"]) <= set(schemes) | {"nothing fits"}
    assert (win["winner"] != "nothing fits").any()


def test_the_workload_expert_cache_reaches_the_layer_pipeline():
    """`[workload] cache_experts` / `expert_reads` set moe_layer_pipeline's cache: a smaller cache misses more (more
    io_stall), prefetching every non-resident expert reads more than routed reads; a dense model with a cache is
    one line."""
    from workbench.scenarios.arena import arena_for_config

    def latency(extra: str):
        config = config_from_text(example_text(extra))
        table = arena_for_config(config, phases=("decode",)).table().set_index("scheme")
        return table.loc["moe_layer_pipeline"]

    full, small = latency("cache_experts = 128"), latency("cache_experts = 16")
    assert full.io_stall_s == 0.0 < small.io_stall_s
    assert latency("cache_experts = 16\nexpert_reads = \"prefetch\"").io_stall_s > small.io_stall_s
    dense = example_text("cache_experts = 8").replace('name = "Qwen3-30B-A3B"', 'name = "Llama 3.1-8B"')
    assert "is dense" in one_line_error(dense)
