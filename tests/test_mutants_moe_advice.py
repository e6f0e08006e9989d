"""Tests that kill mutmut survivors in `workbench/scenarios/moe_advice.py` (see docs/mutation.md, "Speculative decoding,
GGUF formats, MoE advice, scaling").

Every size is worked by hand from the model cards' config.json dimensions, as tests/test_mutants_moe.py does:

* Qwen3-30B-A3B: 48 MoE layers, d 2048, 128 experts of 768 (gate, up, down: 3 x 2048 x 768 = 4,718,592 each),
  top-8, no shared experts. f32 router: 48 x 2048 x 128 x 4 B = 50,331,648 B = 48.0 MiB. One token's experts at
  4.5 bits: 48 x 8 x 4,718,592 x 4.5 / 8 = 1,019,215,872 B; over 4 devices 254,803,968 B = 243.0 MiB. The router
  outweighs that share from ceil(1,019,215,872 / 50,331,648) = ceil(20.25) = 21 devices. A partial sum at 8.5
  bits: 2048 x 8.5 / 8 = 2176 B = 2.1 KiB; at 4 devices a device receives 2 x 48 x 3 x 2176 = 626,688 B = 612.0 KiB.
* DeepSeek-V2-Lite: 27 layers (26 MoE), 64 routed experts + 2 shared, top-6, d 2048.
"""

from __future__ import annotations

import math
from types import SimpleNamespace as Stop

import pytest

from workbench.core.errors import WorkbenchError
from workbench.model.models import get_model
from workbench.scenarios import moe_advice as ma

QWEN = get_model("Qwen3-30B-A3B")
DSV2 = get_model("DeepSeek-V2-Lite")
GIB, MIB = 2**30, 2**20


def qwen(n: int = 4, memory: float = 7 * GIB) -> ma.MoeNumbers:
    return ma.MoeNumbers(QWEN, 4.5, n, 8.5, memory)


# ---- the numbers ---------------------------------------------------------------------------------------------
def test_the_defaults_are_16_bit_activations_and_unbounded_memory():
    numbers = ma.MoeNumbers(QWEN, 4.5, 4)
    assert numbers.activation_bits == pytest.approx(16.0, rel=1e-12) and math.isinf(numbers.memory_per_device_bytes)
    assert numbers.partial_bytes() == pytest.approx(2048 * 2, rel=1e-12)
    assert numbers.resident_at() == 1  # unbounded memory: one device holds everything


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"weight_bits": 0}, r"^weight_bits must be"),
    ({"activation_bits": -1.0}, r"^activation_bits must be"),
    ({"n_devices": 0}, r"^device count must be an integer >= 1, got 0$"),
])
def test_bad_numbers_are_one_line_naming_the_field(kwargs, message):
    with pytest.raises(WorkbenchError, match=message):
        ma.MoeNumbers(**{"model": QWEN, "weight_bits": 4.5, "n_devices": 2, **kwargs})


def test_a_dense_model_is_refused_by_name():
    with pytest.raises(WorkbenchError, match=r"^Llama 2-7B is dense: MoE reasons need a mixture of experts "
                                             r"\(n_experts > 0\)$"):
        ma.MoeNumbers(get_model("Llama 2-7B"), 4.5, 2)


def test_the_sizes_are_the_cards_dimensions():
    numbers = qwen()
    assert numbers.router_bytes == pytest.approx(50_331_648, rel=1e-12)
    assert numbers.experts_bytes() == pytest.approx(1_019_215_872, rel=1e-12)
    assert numbers.router_wins() == 21
    assert numbers.partial_bytes() == pytest.approx(2176, rel=1e-12)
    assert numbers.sync_bytes() == pytest.approx(626_688, rel=1e-12)
    assert ma.MoeNumbers(QWEN, 4.5, 1, 8.5).sync_bytes() == pytest.approx(0.0, abs=1e-9)  # no peers


def test_shared_experts_count_in_a_tokens_expert_reads():
    """DeepSeek-V2-Lite: 26 MoE layers x (6 routed + 2 shared) experts of 3 x 2048 x 1408 at 4 bits."""
    numbers = ma.MoeNumbers(DSV2, 4.0, 8)
    assert numbers.experts_bytes() == pytest.approx(26 * 8 * 3 * 2048 * 1408 * 4 / 8, rel=1e-12)
    assert numbers.router_bytes == pytest.approx(26 * 2048 * 64 * 4, rel=1e-12)


def test_the_router_wins_from_one_device_when_the_experts_are_tiny():
    """At 0.05 bits the experts of a token (11.3 MB) weigh less than the f32 routers (50.3 MB): 1, not 0."""
    assert ma.MoeNumbers(QWEN, 0.05, 2).router_wins() == 1


def test_every_expert_is_resident_from_the_devices_that_hold_the_weights():
    weights = QWEN.weight_bytes(4.5)  # 17.2 GB: 16.0 GiB
    assert qwen(memory=7 * GIB).resident_at() == 3  # ceil(16.0 / 7)
    assert qwen(memory=weights / 2).resident_at() == 2  # exactly two halves
    assert qwen(memory=weights / 2 * 0.999).resident_at() == 3
    assert qwen(memory=10 * weights).resident_at() == 1  # one device holds it ten times over: still 1, not 0


def test_the_fields_quote_the_sizes():
    assert qwen().fields() == {
        "router": "48.0 MiB", "k": "8", "n_experts": "128", "experts_share": "243.0 MiB", "router_wins": "21",
        "syncs": "96", "partial": "2.1 KiB", "sync_bytes": "612.0 KiB", "resident_at": "3",
        # 3,041,855,488 active parameters without the embedding at 4.5 bits: 1,711,043,712 B
        "active": "1.59 GiB",
        # one layer: 604,241,920 expert + router and 18,874,368 attention parameters at 4.5 bits: 350,502,912 B
        "layer": "334.3 MiB"}
    assert QWEN.active_params(include_embedding=False) == 3_041_855_488
    assert QWEN.moe_ffn_params() == 604_241_920 and QWEN.attention_params() == 18_874_368


@pytest.mark.parametrize(("n", "text"), [(GIB, "1.00 GiB"), (GIB - 1, "1024.0 MiB"), (MIB, "1.0 MiB"),
                                         (MIB - 1, "1024.0 KiB"), (1536, "1.5 KiB"), (3.5 * GIB, "3.50 GiB")])
def test_bytes_are_written_in_the_largest_unit_they_reach(n, text):
    assert ma._bytes(n) == text


# ---- partitions and reasons ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("scheme", "kind"), [
    ("dllama_allgather_tp", "tp"), ("moe_layer_pipeline", "pipeline"), ("moe_expert_parallel", "expert"),
    ("layerwise_mp", "pipeline"), ("single_device_resident", "one"), ("disk_offload_blocking", "one"),
    ("pipeline_offload", "pipeline"), ("llamacpp_rpc", "pipeline"), ("exo_tensor", "tp"),
    ("galaxy_hmp", "hybrid"), ("local", "one"), ("sp", "sequence"),
])
def test_the_partition_of_a_scheme(scheme, kind):
    assert ma.partition_of(scheme) == kind


def test_an_unregistered_name_has_no_partition_guessed_from_its_words():
    with pytest.raises(WorkbenchError, match="unknown scheme 'my_expert_pipeline'"):
        ma.partition_of("my_expert_pipeline")


def test_a_reason_is_empty_without_a_partition_or_for_a_cause_it_does_not_have():
    numbers = qwen()
    assert ma.moe_reason(numbers, "local", "memory_s") == ""
    assert ma.moe_reason(numbers, "moe_expert_parallel", "oom") == ""  # the expert partition names no OOM reason
    assert ma.moe_reason(numbers, "moe_layer_pipeline", "oom") == \
        "a layer with all its 128 experts (334.3 MiB) must fit on one device"


def test_the_summary_lines_of_a_model_with_and_without_shared_experts():
    assert ma.moe_summary(qwen()) == [
        "Qwen3-30B-A3B: 128 experts per layer, 8 routed per token; 3.35 B of 30.53 B parameters per token",
        "tensor parallel inside every expert: at 4 devices each streams the whole f32 router (48.0 MiB) and "
        "243.0 MiB of experts per token; the router outweighs the experts' share from 21 devices; syncs receive "
        "612.0 KiB per token",
        "whole layers per device: the weights alone fill 3 devices' memory (a lower bound on where every expert is "
        "resident: the KV cache, the runtime and each scheme's placement add to it, and the table's rows say where "
        "each fits); past that, more devices add hand-offs and shorten no step"]
    first = ma.moe_summary(ma.MoeNumbers(DSV2, 4.5, 8))[0]
    assert first == "DeepSeek-V2-Lite: 64 experts per layer, 6 routed per token + 2 shared; 2.66 B of 15.71 B " \
                    "parameters per token"


def test_stop_notes_skip_stops_without_a_cause_or_a_reason():
    numbers = qwen()
    stops = [Stop(scheme="dllama_allgather_tp", cause=None), Stop(scheme="dllama_allgather_tp"),
             Stop(scheme="dllama_allgather_tp", cause=""), Stop(scheme="moe_layer_pipeline", cause="io_stall_s")]
    assert ma.stop_notes(numbers, stops) == [
        "moe_layer_pipeline: MoE: a layer's 128 experts live on its device; experts that do not fit stream from "
        "storage"]


def test_scheme_notes_word_each_case():
    numbers = qwen()
    notes = ma.scheme_notes(numbers, {
        "dllama_allgather_tp": (1, 2, "ok"),  # one device, the next count ran: the partition's "why"
        "moe_layer_pipeline": (2, None, ""),  # the largest count tried
        "moe_expert_parallel": (2, 4, "OOM"),  # OOM, but the expert partition has no OOM reason
        "single_device_resident": (1, 2, "ok"),  # one device: no note
        "local": (1, 2, "ok"),  # one device: no note
        "galaxy_hmp": (2, 4, "ok"),  # a partition without MoE reasons: no note
        "layerwise_mp": (3, 4, "OOM", 8, "n/a: 8 does not divide 48 layers"),
    })
    assert notes == [
        "dllama_allgather_tp (tensor parallel inside every expert): fastest at 1 device, not faster at 2; MoE: each device "
        "still streams the whole f32 router (48.0 MiB) and its share of the 8 active experts (243.0 MiB at the "
        "largest count); the sync per layer grows (612.0 KiB received per token)",
        "moe_layer_pipeline (whole layers with all their experts): fastest at 2 devices, the largest count tried",
        "moe_expert_parallel (expert parallelism (all-to-all)): fastest at 2 devices, not faster at 4",
        "layerwise_mp (whole layers with all their experts): fastest at 3 devices, not faster at 4; MoE: a "
        "layer with all its 128 experts (334.3 MiB) must fit on one device; cannot split the model at 8: 8 does not "
        "divide 48 layers"]
