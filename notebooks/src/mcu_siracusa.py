# %% [markdown]
# # Distributed inference on up to 64 Siracusa MCUs (Bochem et al.)
# **Claim.** Split every Transformer block head-wise across chips (Q/K/V by heads, W_O by rows, the FFN
# by its width), replicate no weight and synchronise twice per block; once enough chips are used a
# block runs from on-chip L2 and the speedup over one chip is *super-linear*.
#
# **How it is modelled** (`workbench.schemes.mcu_siracusa`, the arena scheme `mcu_headwise_tp`):
# per chip, a block either lives entirely on chip (all blocks fit in L2), runs from L2 while the next
# block is prefetched from L3 (double buffering), or is streamed tile by tile from off-chip L3
# (weights *and* intermediate tensors, as the paper narrates for 1-4 chips). One block's runtime =
# computation + L2<->L1 transfers + L3 streaming + chip-to-chip (the paper's Fig. 4 breakdown); energy is
# the paper's E_total (100 pJ/B L3, 2 pJ/B L2, 13 mW per core, 100 pJ/B MIPI). The chip-to-chip
# reduction is the paper's tree (groups of four, reduce to the root, broadcast back) costed through
# `workbench.network`; the double-buffered prefetch is overlapped with `workbench.simulate`.
#
# **Fitted vs validation.** Three constants are fitted jointly (`M.fit_constants`), each on one reported
# number: `efficiency_gemv` on the 8-chip autoregressive block runtime (0.54 ms), `efficiency_gemm` on the
# 4-chip MobileBERT runtime (38.8 ms) and the L2<->L1 DMA bandwidth `mem_L2_bandwidth` on the 8-chip
# autoregressive block energy (0.64 mJ); the paper states no DMA bandwidth, so it is fitted rather than
# assumed. These three rows match by construction. Every other constant is quoted from the paper or
# assumed with its source in `data/devices/siracusa.toml` and `data/constants/mcu_siracusa.toml`; the
# three speedups (26.1x, 9.9x, 4.7x) are the validation rows.

# %% tags=["parameters"]
figures_dir = None  # None -> the repository's figures/
interactive = True  # False in batch runs: widgets are skipped
quick = False  # True: tiny sweeps (the test suite)
model = "TinyLlama-42M"  # TinyLlama-42M | TinyLlama-42M-64h | MobileBERT
mode = "autoregressive"  # autoregressive | prompt (MobileBERT: prompt)
chips = 8  # chips for the placement table and the timeline
link_bandwidth_gbps = 0.5  # MIPI chip-to-chip bandwidth, GB/s (paper: 0.5)
l3_bandwidth_mbps = 400.0  # off-chip L3 bandwidth, MB/s (assumed HyperRAM on HyperBus)
dtype = "int8"  # int8 | fp16 | fp32 (weights and activations)

# %%
import jax

jax.config.update("jax_num_cpu_devices", 8)

import altair as alt
import numpy as np
import pandas as pd

from workbench.models import get_model, tiny_config
from workbench.papers import mcu_siracusa as M
from workbench.results import Recorder

knobs = M.Knobs(link_bandwidth=link_bandwidth_gbps * 1e9, l3_bandwidth=l3_bandwidth_mbps * 1e6, dtype=dtype)
cfg = get_model(model)
rec = Recorder("mcu_siracusa", figures_dir)
fig6_chips = (1, 8, 32, 64) if quick else M.FIG6_CHIPS
chip_counts = tuple(n for n in (1, 2, 4, 8, 16, 32, 64) if n <= cfg.n_kv_heads)

# %% [markdown]
# ## The partitioned kernel
# `workbench.kernels.mcu_siracusa` is the paper's partitioning as a `shard_map` program: weights split by
# heads / FFN columns, norms and output biases on the root chip only, the residual added by the root
# before the reduction, and an explicit group-of-four tree of `ppermute`s (reduce to the root, norm
# there, broadcast back). Here it runs on 8 host devices for a small Llama and a post-LN encoder, is
# compared with the monolithic reference, and the compiled program's collectives are counted.

# %%
from workbench.kernels import mcu_siracusa as K
from workbench.kernels import reference as R
from workbench.kernels.traffic import compiled_collectives

kernel_rows = []
for family in ("llama",) if quick else ("llama", "bert"):
    small = tiny_config(family)
    params = R.init_params(small, seed=0)
    tokens = np.arange(1, 9)
    error = float(np.max(np.abs(np.asarray(K.headwise_forward(small, params, tokens, 8))
                                - np.asarray(R.forward(small, params, tokens)))))
    fn, blocks = K.stack_program(small, params, 8)
    found = compiled_collectives(jax.jit(fn), np.ones((8, small.d_model), np.float32), np.arange(8), blocks)
    expected = K.kernel_traffic(small, 8, 8)
    kernel_rows.append({"family": family, "max_abs_error_vs_reference": error,
                        "collective_permutes": len(found), "expected_permutes": expected.collective_permutes,
                        "bytes_per_chip": int(found["result_bytes"].sum()), "expected_bytes": expected.bytes_per_chip})
kernel_table = pd.DataFrame(kernel_rows)
rec.add(pd.DataFrame({"paper": M.PAPER, "artifact": "kernel", "model": "tiny-" + kernel_table["family"],
                      "setting": "chips=8,S=8", "quantity": "collective_permutes",
                      "value": kernel_table["collective_permutes"].astype(float), "unit": "count"}))
kernel_table

# %% [markdown]
# ## Memory placement per chip
# What one chip (the root, which also holds the norms) keeps in its 2 MiB L2 and its off-chip L3.
# With 1-4 chips a TinyLlama block does not fit twice in L2, so it is streamed from L3; with 8 chips the
# block's 0.5 MiB int8 slice fits twice (current + prefetched next block); the 64-head variant keeps every
# block on chip from 32 chips on, so double buffering is no longer needed.

# %%
placement = M.placement_frame(model, mode, chip_counts, knobs)
rec.add(M.placement_rows(placement, model, mode))
chart = alt.Chart(placement[placement.level == "L2"]).mark_bar().encode(
    x=alt.X("chips:O"), y=alt.Y("MiB:Q", title="L2 contents of one chip (MiB)"), color="content:N",
    tooltip=["chips", "case", "content", alt.Tooltip("MiB:Q", format=".3f")],
).properties(title=f"{model}, {mode}: what sits in L2 (2 MiB)", width=320)
rec.chart(chart, "placement_l2", data=placement)
placement.pivot_table(index=["chips", "case"], columns=["level", "content"], values="MiB", aggfunc="sum")

# %% [markdown]
# ## Fig. 4: speedup over one chip and the runtime breakdown
# (a) TinyLlama autoregressive (KV cache of 128), (b) prompt mode (16 tokens), (c) MobileBERT (268
# tokens). The dashed line is linear speedup.

# %%
fig4 = M.fig4(knobs)
fig4["label"] = fig4["model"] + " " + fig4["mode"]
panels = []
for panel, title in (("a", "(a) TinyLlama autoregressive"), ("b", "(b) TinyLlama prompt"), ("c", "(c) MobileBERT")):
    part = fig4[fig4.panel == panel]
    panels.append(M.speedup_chart(part, title) & M.breakdown_chart(part, "runtime breakdown"))
rec.chart(alt.hconcat(*panels).resolve_scale(color="independent"), "fig4_speedup_breakdown", data=fig4)
fig4_rows = pd.concat([M.result_rows(fig4[fig4.panel == p], f"Fig. 4{p}") for p in "abc"])
fig4[["panel", "chips", "case", "runtime_ms", "speedup", "energy_mJ"] + [f"{c}_ms" for c in M.BREAKDOWN]]

# %% [markdown]
# ## Fig. 5: energy vs latency per block
# Crosses: the default models; circles: TinyLlama with 64 heads on up to 64 chips. The L3 prefetch of
# the next block costs 100 pJ/B, so energy drops once all blocks stay on chip (32+ chips).

# %%
fig5 = M.fig5(knobs, scaled_chips=fig6_chips)
charts = [M.energy_latency_chart(fig5[fig5.panel == p], t)
          for p, t in (("a", "(a) autoregressive"), ("b", "(b) prompt"), ("c", "(c) MobileBERT"))]
rec.chart(alt.hconcat(*charts), "fig5_energy_latency", data=fig5)
fig5_rows = pd.concat([M.result_rows(fig5[fig5.panel == p], f"Fig. 5{p}") for p in "abc"])
fig5[["panel", "variant", "chips", "case", "runtime_ms", "energy_mJ", "energy_L3_mJ", "energy_cores_mJ"]]

# %% [markdown]
# ## Fig. 6: the 64-head TinyLlama on 2-64 chips

# %%
fig6 = M.fig6(knobs, chips=fig6_chips)
fig6["label"] = fig6["mode"]
rec.chart((M.speedup_chart(fig6, "64-head TinyLlama: speedup over 1 chip") | M.breakdown_chart(
    fig6[fig6["mode"] == "autoregressive"], "autoregressive breakdown")).resolve_scale(color="independent"),
    "fig6_scaled_up", data=fig6)
fig6_rows = M.result_rows(fig6, "Fig. 6")
fig6[["mode", "chips", "case", "runtime_ms", "speedup", "energy_mJ", "steady_state_ms"]]

# %% [markdown]
# ## Fidelity
# `calibration` rows fixed a constant (so they match by construction); `validation` rows did not. The
# first table refits the three constants jointly (nested solve: for a DMA bandwidth both efficiencies
# are fitted on their runtimes, then brentq over the bandwidth on the energy) and compares the refit
# with the values stored in `data/devices/siracusa.toml`.

# %%
device = M.siracusa_device()
stored = {"mem_L2_bandwidth": device.memory_level("L2").bandwidth_bytes_per_s,
          "efficiency_gemv": device.efficiency_gemv, "efficiency_gemm": device.efficiency_gemm}
refit = pd.DataFrame({"stored": stored, "joint_refit": M.fit_constants()})
refit["relative_difference"] = refit["joint_refit"] / refit["stored"] - 1
rec.add(pd.DataFrame({"paper": M.PAPER, "artifact": "fit", "model": "", "setting": refit.index,
                      "quantity": "joint_refit", "value": refit["joint_refit"].astype(float),
                      "unit": ["B/s", "1", "1"]}))
refit

# %%
fidelity = M.fidelity_rows(knobs)
rec.add(M.combine_rows(fig4_rows, fig5_rows, fig6_rows, fidelity))
table = M.fidelity_table(knobs)
table

# %%
patterns = M.pattern_checks(knobs)
rec.add(pd.DataFrame({"paper": M.PAPER, "artifact": "Sec. V claims", "model": "",
                      "setting": patterns["claim"], "quantity": "modelled",
                      "value": patterns["modelled"].astype(float), "unit": ""}))
patterns

# %% [markdown]
# **What pins the DMA bandwidth, and where the model misses.**
# * *Energy, 0.64 mJ* (calibration of `mem_L2_bandwidth`): of E_total, 0.43 mJ is the L3 prefetch of the
#   next block (0.54 MB per chip x 8 chips x 100 pJ/B) and the L2 and MIPI terms are ~0.01 mJ, so the
#   energy fixes the computation time: about 0.20 mJ = 8 chips x 104 mW x 0.24 ms. With the runtime held
#   at the reported 0.54 ms (by `efficiency_gemv`), the rest of the block is L2<->L1 traffic, which sets the
#   DMA bandwidth: the fit gives about 1.9 GB/s (3.8 B/cycle at 500 MHz, under the 8 B/cycle of a 64-bit
#   port; the earlier assumed 4 GB/s gave 0.765 mJ, +20 %). The bandwidth absorbs every error of the other
#   energy terms (mostly the L3 prefetch bytes), so read it as an effective value, not a measured one: the
#   energy moves by about 0.15 mJ per GB/s near the fit (the sensitivity below).
# * *Speedups* (validation): they hardly depend on the DMA bandwidth (the efficiencies are refitted with
#   it): 26.1x is modelled at ~28.0x, 9.9x at ~11.1x (+12 %, inside the tolerance; the small-kernel loss of
#   GEMMs is an assumed constant, half efficiency at 100 kFLOP) and 4.7x at ~4.33x.
# * *Qualitative*: the prompt-mode energy at 8 chips is ~2 % above one chip (the paper says it falls),
#   MobileBERT's energy at 4 chips falls slightly (the paper says it rises slightly), and the 64-head
#   model keeps a super-linear autoregressive speedup at 64 chips where the paper reports a quasi-linear
#   one: GEMV kernels have no small-kernel loss in this model, and the MIPI links have no per-message
#   latency (none is stated). Fitting the DMA bandwidth (1.9 instead of the assumed 4 GB/s) changes none
#   of these outcomes: the same two claims failed before, and all others still hold.
# * *The double buffer*: the paper reports one block with its weights on chip. At the assumed 400 MB/s
#   the next block's 0.5 MiB slice takes 1.35 ms to prefetch, longer than the 0.54 ms block, so a full
#   8-block token stalls on L3 (`steady_state_ms` above; the timeline below); hiding it needs about
#   1 GB/s of L3 bandwidth.

# %% [markdown]
# **Sensitivity to the DMA bandwidth.** Both efficiencies refitted at each bandwidth (so the runtimes stay
# at 0.54 ms and 38.8 ms); the dashed line is the reported 0.64 mJ, the red rule the fitted bandwidth.

# %%
fitted_dma = stored["mem_L2_bandwidth"]
dma = M.dma_sensitivity(tuple(sorted({fitted_dma, 4e9} if quick else {1.5e9, fitted_dma, 2.5e9, 3e9, 4e9})), knobs)
rec.add(pd.DataFrame({"paper": M.PAPER, "artifact": "sensitivity", "model": M.DEFAULT_MODEL,
                      "setting": dma["setting"], "quantity": "block_energy", "value": dma["energy_mJ"],
                      "unit": "mJ"}))
fitted_marker = alt.Chart(pd.DataFrame({"l2_bandwidth_GBps": [fitted_dma / 1e9],
                                        "label": [f"fitted: {fitted_dma / 1e9:.4g} GB/s"]}))
rec.chart(alt.Chart(dma).mark_line(point=True).encode(
    x=alt.X("l2_bandwidth_GBps:Q", title="L2<->L1 DMA bandwidth (GB/s)"),
    y=alt.Y("energy_mJ:Q", title="8-chip autoregressive block energy (mJ)"),
    tooltip=["l2_bandwidth_GBps", "efficiency_gemv", "computation_ms", "energy_mJ", "speedup"],
) + alt.Chart(pd.DataFrame({"reported": [0.64]})).mark_rule(strokeDash=[4, 4]).encode(y="reported:Q")
    + fitted_marker.mark_rule(color="red").encode(x="l2_bandwidth_GBps:Q")
    + fitted_marker.mark_text(align="left", baseline="top", dx=4, dy=4, color="red").encode(
        x="l2_bandwidth_GBps:Q", y=alt.value(0), text="label:N"),
    "sensitivity_dma_energy", data=dma)
dma

# %% [markdown]
# ## One configuration: breakdown and the double-buffered timeline
# The chosen `model`, `mode` and `chips`; every block of one inference step with the L3 prefetch of the
# next block overlapped (`workbench.simulate.pipeline`, two L2 buffers).

# %%
cost = M.block(model, mode, chips, knobs)
timeline = M.timeline(model, mode, chips, knobs)
summary = pd.DataFrame([{"model": model, "mode": mode, "chips": chips, "case": cost.placement.case,
                         "block_runtime_ms": cost.runtime_s * 1e3, "block_energy_mJ": cost.energy_j * 1e3,
                         "prefetch_ms": cost.prefetch_s * 1e3,
                         "steady_state_ms": timeline.makespan / cfg.n_layers * 1e3,
                         **{f"{k}_ms": v * 1e3 for k, v in cost.breakdown().items()},
                         **{f"energy_{k}_mJ": v * 1e3 for k, v in cost.energy_breakdown().items()}}])
rec.add(pd.DataFrame({"paper": M.PAPER, "artifact": "timeline", "model": model,
                      "setting": M.setting_label(cfg, mode, chips), "quantity": "inference_step_latency",
                      "value": [timeline.makespan * 1e3], "unit": "ms"}))
rec.chart(timeline.gantt(f"{model} {mode} on {chips} chips: one inference step").properties(width=520),
          "timeline", data=timeline.frame)
rec.write()
summary.T

# %% [markdown]
# ## What if? (interactive)
# Chips, the off-chip L3 bandwidth and the MIPI bandwidth; the chart shows the speedup over one chip
# and the runtime breakdown for the chosen model and mode.

# %%
if interactive:
    import ipywidgets as widgets

    def what_if_chart(n_max, l3_mbps, mipi_mbps):
        k = M.Knobs(link_bandwidth=mipi_mbps * 1e6, l3_bandwidth=l3_mbps * 1e6, dtype=dtype)
        counts = tuple(n for n in chip_counts if n <= n_max)
        frame = M.scaling(model, mode, counts, k)
        frame["label"] = f"{model} {mode}"
        return (M.speedup_chart(frame, "speedup") | M.breakdown_chart(frame, "runtime breakdown")).resolve_scale(
            color="independent")

    chips_w = widgets.SelectionSlider(options=list(chip_counts), value=max(n for n in chip_counts if n <= chips),
                                      description="max chips")
    l3_w = widgets.FloatLogSlider(value=l3_bandwidth_mbps, base=10, min=1, max=4, description="L3 MB/s")
    mipi_w = widgets.FloatLogSlider(value=link_bandwidth_gbps * 1e3, base=10, min=1, max=4, description="MIPI MB/s")
    jchart = alt.JupyterChart(what_if_chart(chips_w.value, l3_w.value, mipi_w.value))

    def update(_):
        jchart.chart = what_if_chart(chips_w.value, l3_w.value, mipi_w.value)

    for w in (chips_w, l3_w, mipi_w):
        w.observe(update, names="value")
    display(widgets.VBox([widgets.HBox([chips_w, l3_w, mipi_w]), jchart]))  # noqa: F821
