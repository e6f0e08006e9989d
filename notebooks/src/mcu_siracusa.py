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
# **Fixed costs (issue 17).** Every chip launches every kernel of its slice (9 matmuls, softmax, RoPE,
# SwiGLU: 12 per block whatever the number of chips), each paying `kernel_launch` = 2 us: 1000 cycles at
# 500 MHz, the control overhead Deeploy's generated code spends around a kernel's first tile on Siracusa in
# GVSoC (pulp-platform/Deeploy PR #138: 829 cycles before + 171 after the kernel). It replaces the
# assumed `small_kernel_flops` (half efficiency at 100 kFLOP), which stood for the same fixed cost. At each
# synchronisation the leaders accumulate the partial sums they receive, one element-wise kernel per tree
# level (launch + its bytes through L2, or L3 while a block is streamed), and the root normalises; every
# MIPI message costs an *assumed* 0.55 us at its sender and at its receiver (275 cycles, Deeploy's
# per-tile DMA control cost; the paper gives none), serialised at the leader that handles k-1 of them. The
# fixed time runs on the chip's controlling core (Deeploy's tiling loop and DMA set-up run on the master
# core, the 8 cores are forked only around each tile's kernel), so its energy is 13 mW x time.
#
# **Fitted vs validation.** Three constants are fitted jointly (`wb.fit_constants`), each on one reported
# number (the Abstract's rows; every paper number lives in `data/reported/mcu_siracusa.csv`, and the
# fidelity table below quotes them): `efficiency_gemv` on the 8-chip autoregressive block runtime,
# `efficiency_gemm` on the 4-chip MobileBERT runtime and the L2<->L1 DMA bandwidth `mem_L2_bandwidth` on
# the 8-chip autoregressive block energy; the paper states no DMA bandwidth, so it is fitted rather than
# assumed. These three rows match by construction, and the fixed costs above were added *before* the
# refit (same rows, no new fitted constant). Every other constant is quoted, derived or assumed with its
# source in `data/devices/siracusa.toml` and `data/constants/mcu_siracusa.toml`; the three speedups of
# Fig. 4 are the validation rows, and the Sec. V text claims are pattern checks.

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
kernel_launch_us = None  # per-kernel launch on a chip, us (None: the preset's derived 2 us); changes the fit

# %%
import jax

jax.config.update("jax_num_cpu_devices", 8)

import altair as alt
import numpy as np
import pandas as pd

from workbench.display import setup_notebook
from workbench.models import get_model, tiny_config
from workbench.papers import mcu_siracusa as wb
from workbench.results import Recorder

knobs = wb.Knobs(link_bandwidth=link_bandwidth_gbps * 1e9, l3_bandwidth=l3_bandwidth_mbps * 1e6, dtype=dtype,
                kernel_launch=None if kernel_launch_us is None else kernel_launch_us * 1e-6)
if kernel_launch_us is not None:  # another launch cost changes what the calibration rows imply: refit
    knobs = wb.refitted(knobs)
cfg = get_model(model)
rec = Recorder(wb.PAPER, figures_dir)
setup_notebook(interactive)  # tables in human units (results.csv keeps full precision); live charts offline
fig6_chips = (1, 8, 32, 64) if quick else wb.FIG6_CHIPS
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
rec.add(pd.DataFrame({"paper": wb.PAPER, "artifact": "kernel", "model": "tiny-" + kernel_table["family"],
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
placement = wb.placement_frame(model, mode, chip_counts, knobs)
rec.add(wb.placement_rows(placement, model, mode))
chart = alt.Chart(placement[placement.level == "L2"]).mark_bar().encode(
    x=alt.X("chips:O"), y=alt.Y("MiB:Q", title="L2 contents of one chip (MiB)"), color="content:N",
    tooltip=["chips", "case", "content", alt.Tooltip("MiB:Q", format=".3f")],
).properties(title=f"{model}, {mode}: what sits in L2 (2 MiB)", width=320)
rec.chart(chart, "placement_l2", data=placement)
placement.pivot_table(index=["chips", "case"], columns=["level", "content"], values="MiB", aggfunc="sum")

# %% [markdown]
# ## Fig. 4: speedup over one chip and the runtime breakdown
# (a) TinyLlama autoregressive (KV cache of 128), (b) prompt mode (16 tokens), (c) MobileBERT (268
# tokens). The dashed line is linear speedup. The paper's four components (computation, chip-to-chip, L2,
# L3) are shown with the computation's fixed part (`launch`) and its serial part (`accumulation`: partial
# sums up the tree and the root's norm) apart.

# %%
fig4 = wb.fig4(knobs)
fig4["label"] = fig4["model"] + " " + fig4["mode"]
panels = []
for panel, title in (("a", "(a) TinyLlama autoregressive"), ("b", "(b) TinyLlama prompt"), ("c", "(c) MobileBERT")):
    part = fig4[fig4.panel == panel]
    panels.append(wb.speedup_chart(part, title) & wb.breakdown_chart(part, "runtime breakdown"))
rec.chart(alt.hconcat(*panels).resolve_scale(color="independent"), "fig4_speedup_breakdown", data=fig4)
fig4_rows = pd.concat([wb.scaling_rows(fig4[fig4.panel == p], f"Fig. 4{p}") for p in "abc"])
fig4[["panel", "chips", "case", "runtime_ms", "speedup", "energy_mJ"] + [f"{c}_ms" for c in wb.BREAKDOWN]].round(4)

# %% [markdown]
# ## Fig. 5: energy vs latency per block
# Crosses: the default models; circles: TinyLlama with 64 heads on up to 64 chips. The L3 prefetch of
# the next block costs 100 pJ/B, so energy drops once all blocks stay on chip (32+ chips); the MIPI
# term (100 pJ/B) stays and grows with the tree, and the fixed time (launches, message handling) costs
# 13 mW on each chip's controlling core (`energy_cores_fixed_mJ`, part of the cores' energy).

# %%
fig5 = wb.fig5(knobs, scaled_chips=fig6_chips)
charts = [wb.energy_latency_chart(fig5[fig5.panel == p], t)
          for p, t in (("a", "(a) autoregressive"), ("b", "(b) prompt"), ("c", "(c) MobileBERT"))]
rec.chart(alt.hconcat(*charts), "fig5_energy_latency", data=fig5)
fig5_rows = pd.concat([wb.scaling_rows(fig5[fig5.panel == p], f"Fig. 5{p}") for p in "abc"])
fig5[["panel", "variant", "chips", "case", "runtime_ms", "energy_mJ", "energy_L3_mJ", "energy_cores_mJ",
      "energy_cores_fixed_mJ", "energy_chip-to-chip_mJ"]].round(4)

# %% [markdown]
# ## Fig. 6: the 64-head TinyLlama on 2-64 chips
# With 64 heads of dimension 8 a chip's kernels at 64 chips are tiny (a 1x512x8 GEMV is 8 kFLOP), so
# what does not shrink with the split (12 launches per chip, the accumulation up three tree levels, the
# per-message time of 36 messages at the root's path per block) sets the pace there.

# %%
fig6 = wb.fig6(knobs, chips=fig6_chips)
fig6["label"] = fig6["mode"]
rec.chart((wb.speedup_chart(fig6, "64-head TinyLlama: speedup over 1 chip") | wb.breakdown_chart(
    fig6[fig6["mode"] == "autoregressive"], "autoregressive breakdown")).resolve_scale(color="independent"),
    "fig6_scaled_up", data=fig6)
fig6_rows = wb.scaling_rows(fig6, "Fig. 6")
fig6["speedup_per_chip"] = fig6["speedup"] / fig6["chips"]
fig6[["mode", "chips", "case", "runtime_ms", "speedup", "speedup_per_chip", "energy_mJ", "launch_ms",
      "accumulation_ms", "chip-to-chip_ms"]].round(4)

# %% [markdown]
# ### The Sec. V-C claims as pattern checks
# From the text only (the Fig. 6 values at 64 chips are held out): the autoregressive speedup is
# super-linear for 8-32 chips and quasi-linear at 64; prompt mode is linear up to 16 chips with
# diminishing returns after; GEMM runtime scales sub-linearly as kernels shrink; chip-to-chip transfers and
# partial-sum accumulation add a growing overhead. "Linear" / "quasi-linear" is read as speedup/N within
# [0.8, 1.25] (our reading; the paper gives no band).

# %%
fig6_checks = pd.DataFrame(wb.fig6_checks(knobs, fig6_chips), columns=wb.PATTERN_COLUMNS)
fig6_checks

# %% [markdown]
# ### Sensitivity of Fig. 6 to the launch cost
# The launch is derived from GVSoC cycle counts of Deeploy's generated code, not measured on the paper's
# build, so the curve is shown for launches from 0 to 10 us; at each value the three fitted constants are
# refitted on the same three calibration rows, so every curve still meets them.
# The validation errors of the three speedups move with it (table below).

# %%
launches = (0.0, 2e-6, 6e-6) if quick else (0.0, 0.55e-6, 2e-6, 3e-6, 4e-6, 6e-6, 10e-6)
sens = wb.launch_sensitivity(launches, knobs, chips=fig6_chips)
sens["label"] = sens["launch_us"].map(lambda us: f"{us:g} us") + sens["launch_us"].map(
    lambda us: " (derived)" if abs(us - 2.0) < 1e-9 else "")
band = alt.Chart(pd.DataFrame({"low": [0.8], "high": [1.25]})).mark_rect(opacity=0.12, color="gray").encode(
    y="low:Q", y2="high:Q")
panels = []
for mode_name in wb.MODES:
    curves = alt.Chart(sens[sens["mode"] == mode_name]).mark_line(point=True).encode(
        x=alt.X("chips:Q", scale=alt.Scale(type="log", base=2), axis=alt.Axis(values=list(fig6_chips))),
        y=alt.Y("efficiency:Q", title="speedup / chips"),
        color=alt.Color("label:N", title="launch", sort=list(sens.sort_values("launch_us")["label"].unique())),
        tooltip=["mode", "chips", "launch_us", "speedup", "efficiency"])
    panels.append(alt.layer(band, curves).properties(title=mode_name, width=260, height=200))
rec.chart(alt.hconcat(*panels).properties(
    title="Fig. 6 vs the per-kernel launch (constants refitted at each; grey: speedup/N in [0.8, 1.25])"),
    "sensitivity_launch_fig6", data=sens)
rec.add(pd.DataFrame({"paper": wb.PAPER, "artifact": "sensitivity", "model": wb.SCALED_MODEL,
                      "setting": sens["mode"] + ",chips=" + sens["chips"].astype(str) + ",launch="
                      + sens["launch_us"].map("{:g}us".format), "quantity": "speedup", "value": sens["speedup"],
                      "unit": "x"}))
at64 = sens[(sens["mode"] == "autoregressive") & (sens["chips"] == max(fig6_chips))].sort_values("launch_us")
needed = {f"launch for speedup/N = {e:g} at {max(fig6_chips)} chips (us)": float(np.interp(
    -e, -at64["efficiency"].to_numpy(), at64["launch_us"].to_numpy())) for e in (1.25, 1.0)}
errors = sens.groupby("launch_us")[[c for c in sens if c.startswith("error ")] + [
    "efficiency_gemv", "efficiency_gemm", "l2_bandwidth"]].first()
display(pd.Series(needed).round(2))  # noqa: F821
errors.round(4)

# %% [markdown]
# ## Fidelity
# `calibration` rows fixed a constant (so they match by construction); `validation` rows did not. The
# first table refits the three constants jointly (nested solve: for a DMA bandwidth both efficiencies
# are fitted on their runtimes, then brentq over the bandwidth on the energy) and compares the refit
# with the values stored in `data/devices/siracusa.toml`.

# %%
device = wb.siracusa_device()
stored = {"mem_L2_bandwidth": device.memory_level("L2").bandwidth_bytes_per_s,
          "efficiency_gemv": device.efficiency_gemv, "efficiency_gemm": device.efficiency_gemm}
refit = pd.DataFrame({"stored": stored, "joint_refit": wb.fit_constants()})
refit["relative_difference"] = refit["joint_refit"] / refit["stored"] - 1
rec.add(pd.DataFrame({"paper": wb.PAPER, "artifact": "fit", "model": "", "setting": refit.index,
                      "quantity": "joint_refit", "value": refit["joint_refit"].astype(float),
                      "unit": ["B/s", "1", "1"]}))
refit

# %%
fidelity = wb.fidelity_rows(knobs)
rec.add(wb.combine_rows(fig4_rows, fig5_rows, fig6_rows, fidelity))
table = wb.fidelity_table(knobs)
table

# %% [markdown]
# ### Before -> after issue 17 (validation rows)
# *Before*: the model before the fixed-cost work (commit e4f72e0: no launch, the assumed small-kernel
# curve on GEMMs only, no accumulation or per-message cost; efficiency_gemv 0.1432, efficiency_gemm 0.2272,
# DMA 1.902 GB/s). *At start*: the new core (small-kernel curve on GEMVs too) with those stored constants,
# no longer a fit (the 8-chip autoregressive runtime came out 0.736 ms). *After*: this notebook's model. Gain error =
# (modelled - 1) / (reported - 1) - 1.

# %%
speedups = table[table.quantity == "speedup"]  # Fig. 4a, 4b, 4c as reported (data/reported) and modelled
history = pd.DataFrame({
    "row": [f"{r.artifact} {r.reported:g}x ({r.setting})" for r in speedups.itertuples()],
    "reported": speedups["reported"].to_numpy(), "before": [27.9914, 11.0610, 4.3317],
    "at_start": [20.7919, 11.0610, 4.3317]})
history["after"] = speedups["modelled"].to_numpy()
for col in ("before", "at_start", "after"):
    history[f"error_{col}"] = history[col] / history["reported"] - 1
    history[f"gain_error_{col}"] = wb.gain_error(history[col], history["reported"])
history.round(4)

# %%
patterns = wb.pattern_checks(knobs, fig6_chips)
rec.add(wb.pattern_rows(patterns))
patterns

# %% [markdown]
# **What pins the DMA bandwidth, what the fixed costs change, and where the model misses.**
# * *Energy* (calibration of `mem_L2_bandwidth`): of E_total about 0.43 mJ is the L3 prefetch
#   of the next block, and the L2, MIPI, fixed-time (launches and message handling at 13 mW) and root
#   terms are ~0.01 mJ together, so the energy fixes the computation time (about 0.20 mJ = 8 chips x
#   104 mW x 0.23 ms). With the runtime held at the reported value by `efficiency_gemv`, the rest of the block is
#   L2<->L1 traffic, launches (24 us), accumulation (17 us) and MIPI (25 us), which sets the DMA bandwidth:
#   about 2.27 GB/s now (1.90 before: the new fixed terms take time from the transfers). Read it as an
#   effective value.
# * *Speedups* (validation; reported values in the table above): Fig. 4a is modelled at ~27.4x (before:
#   28.0x), Fig. 4b at ~11.3x (before:
#   11.1x: the 1-chip prompt block now also streams its element-wise kernels' tensors and the root's
#   residual and norm through L3, as the paper places intermediate tensors off chip at 1-4 chips) and
#   Fig. 4c at ~4.40x (before: 4.33x).
# * *Fig. 6*: the 64-head autoregressive speedup at 64 chips falls from ~146x (before) to ~90x (speedup/N
#   1.40): still not the quasi-linear speedup the text reports. With the constants refitted, a launch of
#   >= 3.1 us (1.55x the derived 1000 cycles; about 13 us more fixed time per chip and block, or ~6 more
#   2-us kernels than the 12 this model counts, e.g. Deeploy's separate requantisation and KV-cache update
#   nodes) brings it within 1.25 N, and 5.5 us to N, while 8-32 chips stay super-linear: the fixed
#   per-kernel cost is the mechanism, its size on the paper's build is what is uncertain. Prompt mode is
#   not linear at 8 chips (11.4x, like the +14 % of the Fig. 4b row): the model adds the 1-chip block's
#   12.6 ms of L3 streaming to its 18 ms of computation; Fig. 4b needs ~4.2 ms (a third) of that streaming
#   hidden behind computation, an overlap this additive model (and the paper's Fig. 4 breakdown) does not
#   show. A faster assumed L3 cannot fix both: at 0.6 GB/s the prompt curve is linear to 16 chips but the
#   Fig. 4a row drops to -21 %.
# * *Energy directions*: the 8-chip autoregressive block now costs 0.998 of one chip (the paper: "similar"
#   in the abstract, "reduces" in Sec. V-B). This direction rests on where the fixed time's power goes:
#   charged at one core's 13 mW (Deeploy's control code runs on the master core) it holds; charged at the
#   whole cluster's 104 mW (the paper's P for T_comp) the refitted model gives 1.028 and it fails, since
#   8 chips pay 8 x 24 us of launches where one chip pays 24 us. MobileBERT's energy at 4 chips still
#   falls (0.94; the paper: rises slightly, from lower core utilisation of smaller GEMMs, which its
#   hundreds-of-MFLOP kernels do not get from a 2 us launch).
# * *The double buffer*: the paper reports one block with its weights on chip. At the assumed 400 MB/s
#   the next block's 0.5 MiB slice takes 1.35 ms to prefetch, longer than the whole block, so a full
#   8-block token stalls on L3 (`steady_state_ms` above; the timeline below); hiding it needs about
#   1 GB/s of L3 bandwidth.

# %% [markdown]
# **Sensitivity to the DMA bandwidth.** Both efficiencies refitted at each bandwidth (so the runtimes stay
# at their reported values); the dashed line is the reported energy, the red rule the fitted bandwidth.

# %%
fitted_dma = stored["mem_L2_bandwidth"]
reported_energy = table[table.quantity == "block_energy"]["reported"].iloc[0]  # mJ, data/reported
dma = wb.dma_sensitivity(tuple(sorted({fitted_dma, 4e9} if quick else {1.5e9, fitted_dma, 2.5e9, 3e9, 4e9})), knobs)
rec.add(pd.DataFrame({"paper": wb.PAPER, "artifact": "sensitivity", "model": wb.DEFAULT_MODEL,
                      "setting": dma["setting"], "quantity": "block_energy", "value": dma["energy_mJ"],
                      "unit": "mJ"}))
fitted_marker = alt.Chart(pd.DataFrame({"l2_bandwidth_GBps": [fitted_dma / 1e9],
                                        "label": [f"fitted: {fitted_dma / 1e9:.4g} GB/s"]}))
rec.chart(alt.Chart(dma).mark_line(point=True).encode(
    x=alt.X("l2_bandwidth_GBps:Q", title="L2<->L1 DMA bandwidth (GB/s)"),
    y=alt.Y("energy_mJ:Q", title="8-chip autoregressive block energy (mJ)"),
    tooltip=["l2_bandwidth_GBps", "efficiency_gemv", "computation_ms", "energy_mJ", "speedup"],
) + alt.Chart(pd.DataFrame({"reported": [reported_energy]})).mark_rule(strokeDash=[4, 4]).encode(y="reported:Q")
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
cost = wb.block(model, mode, chips, knobs)
timeline = wb.timeline(model, mode, chips, knobs)
summary = pd.DataFrame([{"model": model, "mode": mode, "chips": chips, "case": cost.placement.case,
                         "block_runtime_ms": cost.runtime_s * 1e3, "block_energy_mJ": cost.energy_j * 1e3,
                         "prefetch_ms": cost.prefetch_s * 1e3,
                         "steady_state_ms": timeline.makespan / cfg.n_layers * 1e3,
                         **{f"{k}_ms": v * 1e3 for k, v in cost.breakdown().items()},
                         **{f"energy_{k}_mJ": v * 1e3 for k, v in cost.energy_breakdown().items()}}])
rec.add(pd.DataFrame({"paper": wb.PAPER, "artifact": "timeline", "model": model,
                      "setting": wb.setting_label(cfg, mode, chips), "quantity": "inference_step_latency",
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
        k = wb.Knobs(link_bandwidth=mipi_mbps * 1e6, l3_bandwidth=l3_mbps * 1e6, dtype=dtype)
        counts = tuple(n for n in chip_counts if n <= n_max)
        frame = wb.scaling(model, mode, counts, k)
        frame["label"] = f"{model} {mode}"
        return (wb.speedup_chart(frame, "speedup") | wb.breakdown_chart(frame, "runtime breakdown")).resolve_scale(
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
