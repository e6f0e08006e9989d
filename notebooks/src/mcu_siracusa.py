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
# the paper's E_total (per-byte energies of L3, L2 and MIPI and a power per core, quoted in
# `data/devices/siracusa.toml`). The chip-to-chip
# reduction is the paper's tree (groups of four, reduce to the root, broadcast back) costed through
# `workbench.machine.network`; the double-buffered prefetch is overlapped with `workbench.core.simulate`.
#
# **Fixed costs.** Every chip launches every kernel of its slice (9 matmuls, softmax, RoPE,
# SwiGLU: 12 per block whatever the number of chips), each paying `kernel_launch`: 1000 cycles at
# 500 MHz, the control overhead Deeploy's generated code spends around a kernel's first tile on Siracusa in
# GVSoC (pulp-platform/Deeploy PR #138: 829 cycles before + 171 after the kernel). It replaces the
# assumed `small_kernel_flops` (half efficiency at 100 kFLOP), which stood for the same fixed cost. At each
# synchronisation the leaders accumulate the partial sums they receive, one element-wise kernel per tree
# level (launch + its bytes through L2, or L3 while a block is streamed), and the root normalises; every
# MIPI message costs an *assumed* 275 cycles at its sender and at its receiver (Deeploy's
# per-tile DMA control cost; the paper gives none), serialised at the leader that handles k-1 of them. The
# fixed time runs on the chip's controlling core (Deeploy's tiling loop and DMA set-up run on the master
# core, the 8 cores are forked only around each tile's kernel), so its energy is one core's power x time.
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

from workbench.report.display import setup_notebook
from workbench.model.models import get_model, tiny_config
from workbench.papers import mcu_siracusa as wb
from workbench.report.results import Recorder

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
# block's int8 slice fits twice (current + prefetched next block); the 64-head variant keeps every
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
# one core's power on each chip's controlling core (`energy_cores_fixed_mJ`, part of the cores' energy).

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
# [4/5, 5/4] (our reading; the paper gives no band).

# %%
fig6_checks = pd.DataFrame(wb.fig6_checks(knobs, fig6_chips), columns=wb.PATTERN_COLUMNS)
fig6_checks

# %% [markdown]
# ### Sensitivity of Fig. 6 to the launch cost
# The launch is derived from GVSoC cycle counts of Deeploy's generated code, not measured on the paper's
# build, so the curve is shown for a range of launches (the legend); at each value the three fitted constants are
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
# ### Before -> after the fixed costs (validation rows)
# *Before*: the model before the fixed-cost work (commit e4f72e0: no launch, the assumed small-kernel
# curve on GEMMs only, no accumulation or per-message cost, with the constants fitted then). *At start*: the
# new core (small-kernel curve on GEMVs too) with those stored constants, no longer a fit (so the calibration
# runtime moved). *After*: this notebook's model. Gain error =
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
# **What pins the DMA bandwidth, what the fixed costs change, and where the model misses** (the numbers are
# rendered below from `fig5`, `fig6`, `history`, the launch sensitivity and the stored constants).
# * *Energy* (calibration of `mem_L2_bandwidth`): most of E_total is the L3 prefetch of the next block, and the
#   L2, MIPI, fixed-time and root terms are small beside it, so the energy fixes the computation time. With the
#   runtime held at the reported value by `efficiency_gemv`, the rest of the block is L2<->L1 traffic, launches,
#   accumulation and MIPI, which sets the DMA bandwidth; the new fixed terms take time from the transfers, so it
#   rose with them. Read it as an effective value.
# * *Speedups* (validation): Fig. 4b's 1-chip prompt block now also streams its element-wise kernels' tensors and
#   the root's residual and norm through L3, as the paper places intermediate tensors off chip at 1-4 chips.
# * *Fig. 6*: the fixed costs bring the 64-head autoregressive speedup at 64 chips down, but not to the
#   quasi-linear speedup the text reports. With the constants refitted, a larger launch (e.g. Deeploy's separate
#   requantisation and KV-cache update nodes, kernels this model does not count) brings it within 5/4 N, and a
#   larger one still to N, while 8-32 chips stay super-linear: the fixed per-kernel cost is the mechanism, its
#   size on the paper's build is what is uncertain. Prompt mode is not linear at 8 chips (like the Fig. 4b row):
#   the model adds the 1-chip block's L3 streaming to its computation; Fig. 4b needs part of that streaming hidden
#   behind computation, an overlap this additive model (and the paper's Fig. 4 breakdown) does not show. A faster
#   assumed L3 cannot fix both: one that makes the prompt curve linear to 16 chips takes the Fig. 4a row far off.
# * *Energy directions*: the paper calls the 8-chip autoregressive block's energy "similar" to one chip's (abstract)
#   and "reduces" (Sec. V-B). This direction rests on where the fixed time's power goes: charged at one core's power
#   (Deeploy's control code runs on the master core) it holds; charged at the whole cluster's power (the paper's P
#   for T_comp) it fails, since 8 chips pay 8 times the launches one chip pays. MobileBERT's energy at 4 chips
#   falls, where the paper has it rise slightly, from lower core utilisation of smaller GEMMs, which its
#   hundreds-of-MFLOP kernels do not get from a launch cost.
# * *The double buffer*: the paper reports one block with its weights on chip. At the assumed L3 bandwidth the
#   next block's slice takes longer to prefetch than the whole block runs, so a full 8-block token stalls on L3
#   (`steady_state_ms` below; the timeline).

# %%
from workbench.report.prose import say, span

auto8 = fig5[(fig5.panel == "a") & (fig5.variant == "default") & (fig5.chips == 8)].iloc[0]
bert4 = fig5[(fig5.panel == "c") & (fig5.chips == 4)].iloc[0]
fig6_top = fig6[(fig6["mode"] == "autoregressive") & (fig6.chips == fig6.chips.max())].iloc[0]
say("The 8-chip autoregressive block: {energy:.2f} mJ, of which {l3:.2f} mJ the L3 prefetch; energy over one "
    "chip's {ratio:.3f}, MobileBERT's at 4 chips {bert:.2f}; fitted DMA bandwidth {dma:.2f} GB/s; prefetch of the "
    "next block {prefetch:.2f} ms against a block of {runtime:.2f} ms. Speedups before -> after the fixed costs: "
    "{speedups}. Fig. 6 at {n} chips: {top:.0f}x (speedup/N {per:.2f}); the launch for speedup/N = 5/4 there is "
    "{l125:.1f} us, for 1 {l1:.1f} us.", energy=auto8.energy_mJ, l3=auto8.energy_L3_mJ, ratio=auto8.energy_ratio,
    bert=bert4.energy_ratio, dma=stored["mem_L2_bandwidth"] / 1e9, prefetch=auto8.prefetch_ms,
    runtime=auto8.runtime_ms, speedups=", ".join(f"{r.row}: {r.before:.1f}x -> {r.after:.1f}x"
                                                 for r in history.itertuples()),
    n=int(fig6_top.chips), top=fig6_top.speedup, per=fig6_top.speedup / fig6_top.chips,
    l125=list(needed.values())[0], l1=list(needed.values())[1])

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
# next block overlapped (`workbench.core.simulate.pipeline`, two L2 buffers).

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
