"""Per-module mutation scores from a finished `mutmut run` (what `make mutants` prints at the end).

mutmut 3 writes one ``mutants/<module>.py.meta`` (JSON: mutant name -> exit code) per mutated file; this
reads them, counts killed / total per module, and subtracts the mutants docs/mutation.md argues are
equivalent (listed below by name, so a rename or a newly killed one shows up as a stale entry).

    python scripts/mutants.py            # table of scores per module
    python scripts/mutants.py --survivors  # also every surviving mutant not known to be equivalent
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MUTANTS = ROOT / "mutants"
MODULES = ("workbench/machine/network.py", "workbench/core/simulate.py", "workbench/machine/hardware.py", "workbench/core/fields.py",
           "workbench/schemes/common.py", "workbench/model/models.py", "workbench/model/routing.py", "workbench/scenarios/speculative.py",
           "workbench/model/formats.py", "workbench/scenarios/moe_advice.py", "workbench/scenarios/scaling.py", "workbench/machine/kernel_cost.py")
KILLED = {1, 3}  # mutmut's exit codes for a failing test run (3: pytest internal error)
TIMEOUT = {36, -24, 24, 152, 255}  # the mutant hung: detected too

# Mutants that cannot change any observable result, by reason (argued one by one in docs/mutation.md).
_WHY = {
    "dtype": "a dtype=float dropped where the value is widened to float64 later, or only compared",
    "one_device": "differs only at one device (n = 1), which collective_cost masks to zero",
    "arithmetic": "the changed expression cannot change the result (see docs/mutation.md)",
    "inert": "the changed argument or branch has no effect on any result",
    "zero": "differs only where both sides give the same value (0 FLOPs, 1 bit, no memory)",
    "chance": "differs only when a uniform draw lands exactly on a float (probability about 2^-50 or less)",
    "digits": "a division by 1e9 + 1 for 1e9 in a printed count: a 1e-9 relative change below the digits printed",
    "unreachable": "the changed branch or default is never taken by any input that reaches the line",
}
EQUIVALENT: dict[str, str] = {
    # network: dtype
    **dict.fromkeys([
        "workbench.machine.network.x__check_arrays__mutmut_3",
        "workbench.machine.network.x__check_arrays__mutmut_5",
        "workbench.machine.network.x__check_arrays__mutmut_8",
        "workbench.machine.network.x__check_arrays__mutmut_10",
        "workbench.machine.network.x__check_arrays__mutmut_13",
        "workbench.machine.network.x__check_arrays__mutmut_15",
        "workbench.machine.network.x__check_arrays__mutmut_18",
        "workbench.machine.network.x__check_arrays__mutmut_20",
        "workbench.machine.network.x__log2_steps__mutmut_7",
        "workbench.machine.network.x__log2_steps__mutmut_9",
        "workbench.machine.network.x_gloo_segments_per_rank__mutmut_7",
        "workbench.machine.network.x_gloo_segments_per_rank__mutmut_9",
        "workbench.machine.network.x_gloo_segments_per_rank__mutmut_13",
        "workbench.machine.network.x_gloo_segments_per_rank__mutmut_15",
        "workbench.machine.network.x__gloo_halving_doubling__mutmut_25",
        "workbench.machine.network.x_collective_cost__mutmut_31",
        "workbench.machine.network.x_collective_cost__mutmut_33",
        "workbench.machine.network.x_collective_cost__mutmut_39",
        "workbench.machine.network.x_collective_cost__mutmut_41",
        "workbench.machine.network.x_collective_cost__mutmut_53",
        "workbench.machine.network.x_collective_cost__mutmut_55",
        "workbench.machine.network.x_collective_cost__mutmut_94",
        "workbench.machine.network.x_collective_cost__mutmut_96",
        "workbench.machine.network.x_collective_cost__mutmut_115",
        "workbench.machine.network.x_collective_cost__mutmut_117",
        "workbench.machine.network.x_collective_cost__mutmut_136",
        "workbench.machine.network.x_collective_cost__mutmut_138",
    ], _WHY["dtype"]),
    # network: one_device
    **dict.fromkeys([
        "workbench.machine.network.x_tree_depth__mutmut_13",
        "workbench.machine.network.x_tree_depth__mutmut_23",
        "workbench.machine.network.x__halving_doubling__mutmut_17",
        "workbench.machine.network.x__gloo_halving_doubling__mutmut_20",
        "workbench.machine.network.x_collective_cost__mutmut_28",
    ], _WHY["one_device"]),
    # network: arithmetic
    **dict.fromkeys([
        "workbench.machine.network.x__halving_doubling__mutmut_18",
        "workbench.machine.network.x_gloo_segments_per_rank__mutmut_36",
        "workbench.machine.network.x_gloo_segments_per_rank__mutmut_42",
        "workbench.machine.network.x_gloo_segments_per_rank__mutmut_43",
        "workbench.machine.network.x_gloo_segments_per_rank__mutmut_44",
        "workbench.machine.network.x__mesh__mutmut_53",
        "workbench.machine.network.x__gloo_ring__mutmut_46",
        "workbench.machine.network.x__gloo_halving_doubling__mutmut_7",
        "workbench.machine.network.x__gloo_halving_doubling__mutmut_24",
    ], _WHY["arithmetic"]),
    # network: inert
    **dict.fromkeys([
        "workbench.machine.network.x_total_traffic__mutmut_1",
        "workbench.machine.network.x_total_traffic__mutmut_6",
        "workbench.machine.network.x_total_traffic__mutmut_11",
        "workbench.machine.network.x_total_traffic__mutmut_12",
        "workbench.machine.network.x_traversals__mutmut_14",
        "workbench.machine.network.x_endpoint_messages__mutmut_14",
        "workbench.machine.network.xǁTopologyǁ__post_init____mutmut_15",
    ], _WHY["inert"]),
    # simulate: inert
    **dict.fromkeys([
        "workbench.core.simulate.xǁTimelineǁresources__mutmut_5",
        "workbench.core.simulate.x_pipeline__mutmut_39",
        "workbench.core.simulate.x_pipeline__mutmut_53",
    ], _WHY["inert"]),
    # hardware: dtype
    **dict.fromkeys([
        "workbench.machine.hardware.xǁDeviceSpecǁcompute_time__mutmut_7",
        "workbench.machine.hardware.xǁDeviceSpecǁcompute_time__mutmut_9",
        "workbench.machine.hardware.xǁDeviceSpecǁstream_time__mutmut_15",
        "workbench.machine.hardware.xǁDeviceSpecǁstream_time__mutmut_17",
    ], _WHY["dtype"]),
    # hardware: zero
    **dict.fromkeys([
    ], _WHY["zero"]),
    # schemes.common: dtype
    **dict.fromkeys([
        "workbench.schemes.common.x_matmul_time__mutmut_5",
        "workbench.schemes.common.x_matmul_time__mutmut_7",
        "workbench.schemes.common.x_launched__mutmut_8",
        "workbench.schemes.common.x_launched__mutmut_10",
        "workbench.schemes.common.x_score_flops__mutmut_7",
        "workbench.schemes.common.x_score_flops__mutmut_9",
        "workbench.schemes.common.x_score_flops__mutmut_11",
        "workbench.schemes.common.x_score_flops__mutmut_13",
        "workbench.schemes.common.x_score_flops__mutmut_15",
        "workbench.schemes.common.x_score_flops__mutmut_17",
        "workbench.schemes.common.x_out_proj_flops__mutmut_7",
        "workbench.schemes.common.x_out_proj_flops__mutmut_9",
        "workbench.schemes.common.x_out_proj_flops__mutmut_11",
        "workbench.schemes.common.x_out_proj_flops__mutmut_13",
        "workbench.schemes.common.x_ffn_up_flops__mutmut_16",
        "workbench.schemes.common.x_ffn_up_flops__mutmut_18",
        "workbench.schemes.common.x_ffn_down_flops__mutmut_10",
        "workbench.schemes.common.x_ffn_down_flops__mutmut_12",
        "workbench.schemes.common.x_distinct_devices__mutmut_12",
        "workbench.schemes.common.x_distinct_devices__mutmut_14",
    ], _WHY["dtype"]),
    # schemes.common: zero
    **dict.fromkeys([
        "workbench.schemes.common.x_code_bits__mutmut_6",
    ], _WHY["zero"]),
    # models (MoE / MLA cost code): inert (require_int's default low is 1; FieldSpec's high and TomlKey's unit
    # default to inf and "")
    **dict.fromkeys([
        "workbench.model.models.x__count__mutmut_11",
        "workbench.model.models.x__count__mutmut_24",
        "workbench.model.models.xǁTransformerConfigǁ_check_moe__mutmut_67",
        "workbench.model.models.xǁTransformerConfigǁ_check_mla__mutmut_38",
        "workbench.model.models.xǁTransformerConfigǁactivation_bytes__mutmut_7",
        "workbench.model.models.xǁTransformerConfigǁactivation_bytes__mutmut_20",
    ], _WHY["inert"]),
    # routing: dtype
    **dict.fromkeys([
        "workbench.model.routing.x_zipf_weights__mutmut_4",
        "workbench.model.routing.x_zipf_weights__mutmut_7",
        "workbench.model.routing.x_expected_distinct__mutmut_31",
        "workbench.model.routing.x_expected_distinct__mutmut_33",
        "workbench.model.routing.x_expected_misses__mutmut_22",
        "workbench.model.routing.x_expected_misses__mutmut_24",
    ], _WHY["dtype"]),
    # routing: inert (an argument equal to its default: require_int's low=1, accumulate's axis 0, the last axis of a
    # 2-D array, numpy's reshape taking any negative size as the inferred one; the block size of draws taken in order)
    **dict.fromkeys([
        "workbench.model.routing.x_check_experts__mutmut_6",
        "workbench.model.routing.x_pinned_set__mutmut_7",
        "workbench.model.routing.x_simulate_routing__mutmut_8",
        "workbench.model.routing.x_simulated_distinct__mutmut_6",
        "workbench.model.routing.x_lru_ranks__mutmut_2",
        "workbench.model.routing.x_lru_ranks__mutmut_57",
        "workbench.model.routing.x_lru_ranks__mutmut_77",
        "workbench.model.routing.x__systematic__mutmut_25",
        "workbench.model.routing.x__systematic__mutmut_75",
        "workbench.model.routing.x__systematic__mutmut_84",
        "workbench.model.routing.x__systematic__mutmut_88",
        "workbench.model.routing.x_simulated_distinct__mutmut_18",
        "workbench.model.routing.x_simulated_distinct__mutmut_25",
        "workbench.model.routing.x_simulated_distinct__mutmut_38",
    ], _WHY["inert"]),
    # routing: arithmetic (see docs/mutation.md, "MoE cost code")
    **dict.fromkeys([
        "workbench.model.routing.x_water_fill__mutmut_36",
        "workbench.model.routing.x_che_window__mutmut_16",
        "workbench.model.routing.x_che_window__mutmut_17",
        "workbench.model.routing.x_che_window__mutmut_34",
        "workbench.model.routing.x_che_window__mutmut_39",
        "workbench.model.routing.x__lru_resident__mutmut_11",
        "workbench.model.routing.x__lru_resident__mutmut_14",
        "workbench.model.routing.x__lru_resident__mutmut_6",
        "workbench.model.routing.x__systematic__mutmut_42",
        "workbench.model.routing.x_simulate_routing__mutmut_43",
        "workbench.model.routing.x_lru_ranks__mutmut_12",
        "workbench.model.routing.x_lru_ranks__mutmut_37",
    ], _WHY["arithmetic"]),
    # routing: chance
    **dict.fromkeys([
        "workbench.model.routing.x__systematic__mutmut_50",
        "workbench.model.routing.x__systematic__mutmut_67",
        "workbench.model.routing.x_simulate_routing__mutmut_49",
        "workbench.model.routing.x_lru_ranks__mutmut_91",
    ], _WHY["chance"]),
    # schemes.common, MoE / MLA rows: dtype (score_flops 7-17 above are now the latent branch's, 25-35 the dense one's)
    **dict.fromkeys([
        "workbench.schemes.common.x_score_flops__mutmut_25",
        "workbench.schemes.common.x_score_flops__mutmut_27",
        "workbench.schemes.common.x_score_flops__mutmut_29",
        "workbench.schemes.common.x_score_flops__mutmut_31",
        "workbench.schemes.common.x_score_flops__mutmut_33",
        "workbench.schemes.common.x_score_flops__mutmut_35",
        "workbench.schemes.common.x__weight_gemm_rows__mutmut_12",
        "workbench.schemes.common.x__weight_gemm_rows__mutmut_14",
        "workbench.schemes.common.x__weight_gemm_rows__mutmut_45",
        "workbench.schemes.common.x__weight_gemm_rows__mutmut_47",
        "workbench.schemes.common.x__weight_gemm_rows__mutmut_72",
        "workbench.schemes.common.x__weight_gemm_rows__mutmut_74",
        "workbench.schemes.common.x_experts_touched__mutmut_3",
        "workbench.schemes.common.x_experts_touched__mutmut_5",
        "workbench.schemes.common.x__expert_rows__mutmut_59",
        "workbench.schemes.common.x__expert_rows__mutmut_61",
        "workbench.schemes.common.x__expert_rows__mutmut_69",
        "workbench.schemes.common.x__expert_rows__mutmut_71",
        "workbench.schemes.common.x__expert_rows__mutmut_84",
        "workbench.schemes.common.x__expert_rows__mutmut_86",
        "workbench.schemes.common.x_kv_read_bytes__mutmut_15",
        "workbench.schemes.common.x_kv_read_bytes__mutmut_17",
    ], _WHY["dtype"]),
    # schemes.common, MoE rows: inert (the up projection is gated in every MoE model: n_experts needs family llama)
    **dict.fromkeys([
        "workbench.schemes.common.x__expert_rows__mutmut_48",
        "workbench.schemes.common.x__expert_rows__mutmut_50",
    ], _WHY["inert"]),
    # schemes.common, MoE rows: zero (no expert touched: 0 tokens, so t x k / 1e-300 is 0 as well)
    **dict.fromkeys([
        "workbench.schemes.common.x__expert_rows__mutmut_36",
    ], _WHY["zero"]),
    # kernel_cost (engine kernels): float() reads "NAN" as "nan" (case-blind)
    **dict.fromkeys([
        "workbench.machine.kernel_cost.x__count__mutmut_6",
    ], _WHY["inert"]),
    # kernel_cost: a bits difference of exactly 1e-9 is unreachable (differences near a format's width are multiples
    # of 2^-51; 1e-9 is not)
    **dict.fromkeys([
        "workbench.machine.kernel_cost.x_format_for_bits__mutmut_22",
    ], _WHY["arithmetic"]),
    # speculative: inert (require_int's default low is 1; float("NAN") is NaN; a one-device cluster sends nothing over
    # its link; `plain` only saves recomputing the same one-token result; head(1) keeps sort_values' group order)
    **dict.fromkeys([f"workbench.scenarios.speculative.{m}" for m in (
        "xǁSpeculationǁ__post_init____mutmut_14", "x_expected_tokens__mutmut_6", "x_acceptance_table__mutmut_29",
        "x_draft_step_time__mutmut_16", "x_alpha_sweep__mutmut_1", "x_alpha_sweep__mutmut_22",
        "x_alpha_sweep__mutmut_29", "x_best_gamma__mutmut_2", "x_best_over_gamma__mutmut_10",
        "x_best_over_gamma__mutmut_12", "x_best_over_gamma__mutmut_14")], _WHY["inert"]),
    # speculative: dtype (numbers only: integer lengths multiply and divide to the same float64)
    **dict.fromkeys([f"workbench.scenarios.speculative.{m}" for m in (
        "x_expected_tokens__mutmut_14", "x_expected_tokens__mutmut_16", "x_simulate_tokens__mutmut_6",
        "x_simulate_tokens__mutmut_8")], _WHY["dtype"]),
    # speculative: arithmetic (see docs/mutation.md, "Speculative decoding, GGUF formats, MoE advice, scaling")
    **dict.fromkeys([f"workbench.scenarios.speculative.{m}" for m in (
        "x_check_lengths__mutmut_3", "x_check_lengths__mutmut_9", "x_check_lengths__mutmut_24",
        "x__solve_alpha__mutmut_15", "x__solve_alpha__mutmut_24")], _WHY["arithmetic"]),
    **dict.fromkeys([f"workbench.scenarios.speculative.{m}" for m in (
        "x_check_draft__mutmut_6", "x_check_draft__mutmut_8")], _WHY["digits"]),
    # speculative: unreachable (a MoE step's union counts at least k >= 1 experts; at exactly 1 the share is 0 anyway)
    **dict.fromkeys([f"workbench.scenarios.speculative.{m}" for m in (
        "x_expert_misses__mutmut_20", "x_expert_misses__mutmut_25", "x_expert_misses__mutmut_26",
        "x_expert_misses__mutmut_27")], _WHY["unreachable"]),
    "workbench.scenarios.speculative.x_handoff_time__mutmut_31": _WHY["one_device"],
    "workbench.scenarios.speculative.x_simulate_tokens__mutmut_23": _WHY["chance"],
    # moe_advice: inert (require_int's default low; include_embedding=None is falsy like False; a "" / None default
    # that the next line treats as "no reason" either way)
    **dict.fromkeys([f"workbench.scenarios.moe_advice.{m}" for m in (
        "xǁMoeNumbersǁ__post_init____mutmut_20", "xǁMoeNumbersǁfields__mutmut_42", "x_moe_reason__mutmut_3",
        "x_moe_reason__mutmut_5", "x_moe_reason__mutmut_13", "x_stop_notes__mutmut_12", "x_stop_notes__mutmut_18",
        "x_stop_notes__mutmut_19", "x_scheme_notes__mutmut_29", "x_scheme_notes__mutmut_31")], _WHY["inert"]),
    **dict.fromkeys([f"workbench.scenarios.moe_advice.{m}" for m in (
        "x_moe_summary__mutmut_8", "x_moe_summary__mutmut_10")], _WHY["digits"]),
    # scaling: inert (pandas reads to_dict's orient case-blind; a None default becomes 0.0 on the next line as a
    # missing value does)
    **dict.fromkeys([f"workbench.scenarios.scaling.{m}" for m in (
        "x__records__mutmut_6", "x_stop_helping_all__mutmut_10", "x__seconds__mutmut_3", "x__seconds__mutmut_5")],
        _WHY["inert"]),
    # scaling: `<` for `<=` in the tie test: the float difference never equals 1e-9 x the best latency exactly
    "workbench.scenarios.scaling.x_stop_helping__mutmut_109": _WHY["arithmetic"],
}


def load(module: str) -> dict[str, int | None]:
    """Mutant name -> exit code for one module (empty if mutmut has not run on it)."""
    meta = MUTANTS / f"{module}.meta"
    if not meta.exists():
        return {}
    return json.loads(meta.read_text("utf-8"))["exit_code_by_key"]


def summarise(show_survivors: bool) -> int:
    """Print killed / total per module and the non-equivalent score; return 1 if any module lacks results."""
    missing = 0
    print(f"{'module':32s} {'killed':>7s} {'total':>6s} {'score':>7s} {'equiv':>6s} {'non-equiv score':>16s}")
    for module in MODULES:
        codes = load(module)
        if not codes:
            print(f"{module:32s} (no results: run `make mutants`)")
            missing = 1
            continue
        killed = sum(1 for c in codes.values() if c in KILLED or c in TIMEOUT)
        equiv = [k for k in codes if k in EQUIVALENT]
        stale = [k for k in equiv if codes[k] in KILLED or codes[k] in TIMEOUT]
        total, eq = len(codes), len(equiv) - len(stale)
        score = killed / total if total else 1.0
        ne = killed / (total - eq) if total > eq else 1.0
        print(f"{module:32s} {killed:7d} {total:6d} {score:7.1%} {eq:6d} {ne:16.1%}")
        for k in stale:
            print(f"    listed as equivalent but killed (drop it from EQUIVALENT): {k}")
        if show_survivors:
            for k, c in codes.items():
                if c not in KILLED and c not in TIMEOUT and k not in EQUIVALENT:
                    print(f"    {k}: exit {c}")
    known = {k for m in MODULES for k in load(m)}
    for k in sorted(set(EQUIVALENT) - known):
        print(f"    listed as equivalent but no longer generated (renumbered? re-check): {k}")
    return missing


def main(argv: list[str] | None = None) -> int:
    """Command line: the per-module table, optionally with the unexplained survivors."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--survivors", action="store_true", help="list surviving mutants not known to be equivalent")
    return summarise(parser.parse_args(argv).survivors)


if __name__ == "__main__":
    sys.exit(main())
