# %% [markdown]
# # Galaxy: hybrid TP + SP on Jetson Nano clusters
# Ye et al., *Galaxy: A Resource-Efficient Collaborative Edge AI System for In-situ Transformer Inference*
# (`../shared/papers/galaxy.txt`). Galaxy splits the MHA and MLP blocks by heads and FFN columns (TP) and the
# connective residual/LayerNorm block by tokens (SP) - *hybrid model parallelism* (HMP) - plans the split with
# Algorithm 1 (capacity-proportional, then memory-aware), and hides the ring all-gather / reduce-scatter behind
# the GEMMs tile by tile.
#
# Everything below runs on the workbench's shared cost model (`workbench.schemes.galaxy`: Local, M-LM = Megatron
# TP, SP, HMP, HMP + overlap as a timeline of tiles on compute and link resources) over Jetson Nano presets
# (`data/devices/jetson_nano_*.toml`). The JAX `shard_map` versions of the four layouts, with the
# tile-based ring overlap written with `ppermute`, are in `workbench.kernels.galaxy` and are tested against the
# reference forward pass and against this cost model's collective bytes (`tests/test_galaxy.py`).
#
# **Fitted vs validation.** Three constants are fitted: the Nano CPU's GEMM efficiency on Table I's BERT-L
# Nano-M latency (2.43 s); the A100's per-layer overhead on Table I's BERT-L A100 latency (20 ms); and the A100's
# arithmetic precision, a choice between fp16 tensor cores and fp32 made on Table I's OPT-L / OPT-XL A100 rows
# (27 / 38 ms): with fp16 the modelled per-layer time is flat (overhead-bound) and both come out 22 % low, while
# the paper's per-layer times grow with layer size (0.83 ms for BERT-L, 1.19 ms for OPT-XL) as fp32 GEMMs on
# CUDA cores do. Every other reported number - DistilBERT and GPT2-L on both devices, all of Table IV, the
# ranges of Figs. 8 and 9, Fig. 10's weak-scaling efficiencies - is validation. No network constant is fitted:
# links run at the paper's nominal bandwidths (with an assumed 0.1 ms per switch hop).

# %% tags=["parameters"]
figures_dir = None  # None -> figures/
interactive = True  # False in batch runs: widgets are skipped
quick = False  # True: tiny sweeps, used by the test suite (must run in < 30 s)
model = "GPT2-L"  # DistilBERT | BERT-L | GPT2-L | OPT-L | OPT-XL (the headline comparison and the what-if)
environment = "B"  # Table III: A-C are 2-4 Nano-M; D is L+M, E is L+S, F is L+M+S
bandwidth_mbps = 125.0  # the paper's Table IV / Fig. 9 bandwidth
seq_len = 284  # the paper's average QNLI sequence length
devices = None  # None -> the environment's device count; an int resizes a homogeneous environment
processor = "cpu"  # cpu (Sec. IV-A) | gpu (Sec. IV-E: Nano GPUs at 460 MHz, homogeneous environments only)

# %%
import altair as alt
import pandas as pd

from workbench.fidelity import load_reported, scoreboard
from workbench.hardware import load_device
from workbench.papers import galaxy as G
from workbench.results import Recorder

rec = Recorder("galaxy", figures_dir)
reported = load_reported().query("paper == 'galaxy'")
pd.DataFrame({
    "constant": ["Nano CPU efficiency_gemm", "A100 layer_overhead (s)", "A100 activation bits (fp32 GEMMs)"],
    "fitted now": [G.fit_nano_cpu_efficiency(), G.fit_a100_layer_overhead(), G.const("activation_bits_a100")],
    "stored (data/)": [G.nano_cpu("M").efficiency_gemm, load_device("a100").provenance["layer_overhead"].value,
                       G.const("activation_bits_a100")],
    "fitted on": ["Table I BERT-L Nano-M 2.43 s", "Table I BERT-L A100 20 ms", "Table I OPT-L/XL A100 27/38 ms"],
})

# %% [markdown]
# ## The headline comparison (parameters above)
# Latency of every scheme on the chosen model, environment, bandwidth and sequence length, split into compute,
# link latency and bytes on the wire; `galaxy_speedup` is Galaxy's (HMP + overlap) speedup over that scheme.
# A scheme that does not fit its devices' memory budgets is marked `oom`.

# %%
headline = G.compare(model, environment, bandwidth_mbps, seq_len, processor, devices)
parts = headline.melt(id_vars=["scheme", "oom"], value_vars=["compute_s", "comm_link_latency_s", "comm_bytes_s"],
                      var_name="part", value_name="seconds")
breakdown = alt.Chart(parts).mark_bar().encode(
    x=alt.X("seconds:Q", title="latency (s)"), y=alt.Y("scheme:N", sort=None), color="part:N",
    tooltip=["scheme", "part", "seconds", "oom"],
).properties(title=f"{model}, env {environment}, {bandwidth_mbps:g} Mbps, S={seq_len}, {processor}", width=460)
rec.chart(breakdown, "headline_breakdown", data=headline)
headline[["scheme", "latency_s", "compute_s", "comm_link_latency_s", "comm_bytes_s", "peak_memory_bytes", "oom",
          "galaxy_speedup"]]

# %%
layer = G.timeline(model, environment, bandwidth_mbps, seq_len, processor, devices)
gantt = layer.gantt(f"One Galaxy layer: GEMM tiles (cpu) overlapped with ring steps (link), {model}")
rec.chart(gantt.properties(width=560), "headline_timeline", data=layer.frame)

# %% [markdown]
# ## Table I: on-device latency at 30 tokens
# Nano-M (825 MHz, 1.5 GB budget) and an A100. GPT2-L, OPT-L and OPT-XL do not fit a Nano-M's 1.5 GB
# (their fp16 weights alone are 1.55, 2.63 and 5.30 GB). The memory footprints of Table I are reproduced by the
# `models` notebook.

# %%
t1 = G.table1()
rec.add(G.table1_rows(t1))
t1_chart = alt.Chart(t1[~t1.oom]).mark_bar().encode(
    x=alt.X("latency_s:Q", scale=alt.Scale(type="log"), title="latency (s)"), y="model:N", color="device:N",
    yOffset="device:N", tooltip=["model", "device", "latency_s"],
).properties(title="Table I: local latency (S=30)", width=420)
rec.chart(t1_chart, "table1_latency", data=t1)
t1

# %% [markdown]
# ## Table IV: Galaxy's speedup over M-LM and SP (homogeneous environments)
# SP holds every weight on every device and runs out of memory from GPT2-L up; OPT-XL does not fit two or three
# 1.5 GB Nanos under any scheme. No constant is fitted on this table: the speedups follow from the CPU
# efficiency fitted on Table I and the nominal 125 Mbps. They come from hiding the four ring steps per layer
# (two all-reduces' worth of bytes) behind the GEMM tiles; HMP without the overlap is within 0.1 % of M-LM,
# because the connective block it parallelises is < 1 % of a layer on these CPUs.

# %%
t4 = G.table4(bandwidth_mbps, seq_len)
rec.add(G.speedup_rows("Table IV", t4))
t4_long = t4.melt(id_vars=["model", "environment"], value_vars=["speedup_over_mlm", "speedup_over_sp"],
                  var_name="baseline", value_name="speedup").dropna()
t4_chart = alt.Chart(t4_long).mark_bar().encode(
    x=alt.X("speedup:Q", title="Galaxy speedup (x)"), y=alt.Y("model:N", sort=list(G.MODELS)),
    color="baseline:N", yOffset="baseline:N", row="environment:N", tooltip=["model", "environment", "baseline", "speedup"],
).properties(title=f"Table IV ({bandwidth_mbps:g} Mbps, S={seq_len})", width=380)
rec.chart(t4_chart, "table4_speedup", data=t4)
t4[["model", "environment", "speedup_over_mlm", "speedup_over_sp", "oom_vs_mlm", "oom_vs_sp"]]

# %% [markdown]
# ## Fig. 8: bandwidth sweep
# The paper does not list its five bandwidths; 125-1000 Mbps is assumed (`data/constants/galaxy.toml`).
# The recorded range is the smallest and largest speedup over any baseline that fits.

# %%
sweep_bws = [125, 1000] if quick else G.const("bandwidth_sweep")
fig8 = G.bandwidth_sweep(sweep_bws, seq_len=seq_len)
rec.add(G.range_rows("Fig. 8", G.sweep_setting(sweep_bws), fig8))
fig8_long = fig8.melt(id_vars=["model", "environment", "bandwidth_mbps"],
                      value_vars=["speedup_over_mlm", "speedup_over_sp"], var_name="baseline",
                      value_name="speedup").dropna()
fig8_long["cell"] = fig8_long.model + " / " + fig8_long.environment
fig8_chart = alt.Chart(fig8_long).mark_line(point=True).encode(
    x=alt.X("bandwidth_mbps:Q", scale=alt.Scale(type="log"), title="bandwidth (Mbps)"),
    y=alt.Y("speedup:Q", title="Galaxy speedup (x)", scale=alt.Scale(zero=False)), color="cell:N",
    strokeDash="baseline:N",
    tooltip=["cell", "baseline", "bandwidth_mbps", "speedup"],
).properties(title="Fig. 8: speedup vs bandwidth", width=460)
rec.chart(fig8_chart, "fig8_bandwidth", data=fig8)
G.speedup_range(fig8)

# %% [markdown]
# ## Fig. 9: heterogeneous environments D, E, F (125 Mbps)
# Budgets 1.5 / 1.2 / 0.7 GB for Nano-L / M / S. M-LM and SP split evenly and ignore the budgets; Galaxy's
# Algorithm 1 splits by capacity (Eq. 6) and moves work off devices over budget.

# %%
fig9 = G.heterogeneous(bandwidth_mbps=bandwidth_mbps, seq_len=seq_len)
rec.add(G.range_rows("Fig. 9", G.hetero_setting(bandwidth_mbps), fig9))
rec.add(G.speedup_rows("Fig. 9", fig9))
fig9_long = fig9.melt(id_vars=["model", "environment"], value_vars=["speedup_over_mlm", "speedup_over_sp"],
                      var_name="baseline", value_name="speedup").dropna()
fig9_chart = alt.Chart(fig9_long).mark_bar().encode(
    x=alt.X("model:N", sort=list(G.MODELS)), y=alt.Y("speedup:Q", title="Galaxy speedup (x)"),
    color="baseline:N", xOffset="baseline:N", column="environment:N",
    tooltip=["model", "environment", "baseline", "speedup"],
).properties(title="Fig. 9: heterogeneous environments", width=200)
rec.chart(fig9_chart, "fig9_heterogeneous", data=fig9)
fig9[["model", "environment", "speedup_over_mlm", "speedup_over_sp", "galaxy_oom", "mlm_oom", "sp_oom"]]

# %% [markdown]
# ## Figs. 10 and 11: weak and strong scaling (environment C, 1000 Mbps, one layer)

# %%
scaling_bw = G.const("bandwidth_scaling")
fig10 = G.weak_scaling(max_devices=4)
rec.add(G.weak_rows(fig10, scaling_bw))
fig10_chart = alt.Chart(fig10).mark_line(point=True).encode(
    x=alt.X("devices:O"), y=alt.Y("system_flops:Q", title="system FLOP/s"), color="model:N",
    tooltip=["model", "devices", "system_flops", "scaling_efficiency"],
).properties(title="Fig. 10: weak scaling (96 tokens per device)", width=360)
rec.chart(fig10_chart, "fig10_weak_scaling", data=fig10)
fig11 = G.strong_scaling(max_devices=4)
rec.add(G.strong_rows(fig11, scaling_bw))
fig11_chart = alt.Chart(fig11).mark_line(point=True).encode(
    x=alt.X("devices:O"), y=alt.Y("latency_s:Q", title="latency per layer (s)"), color="scheme:N",
    column="model:N", tooltip=["model", "devices", "scheme", "latency_s", "reduction_vs_local"],
).properties(title="Fig. 11: strong scaling (S=384)", width=260)
rec.chart(fig11_chart, "fig11_strong_scaling", data=fig11)
fig10

# %% [markdown]
# ## Why Figs. 9 and 10 miss: what the model can and cannot move
# **Fig. 10.** At a fixed 96 tokens per device, each device's GEMM work is constant (weights / n x 96 n tokens);
# only attention (heads / n x (96 n)^2, about 5 % of GPT2-L's layer at 384 tokens) and the ring volume
# (96 (n - 1) tokens per collective) grow with n. With the tile overlap every ring step (about 4 ms at
# 1000 Mbps) hides behind a GEMM tile (10-40 ms) - the paper's own claim (Sec. III-D: "without imposing
# additional overhead") - so the model scales at about 100 %. The table bounds what these mechanisms can cost:
# with *every* ring step exposed (plain HMP) and FLOPs counted without attention (`time_efficiency`), the
# efficiency is still about 88 % (GPT2-L) and 94 % (OPT-XL). Wire time and attention cannot explain the
# paper's 81 % / 86 %; the loss must come from what the paper does not describe (CPU time of the network stack
# on the same four cores, synchronisation jitter, framework overhead), for which there is no number to use.
#
# **Fig. 9.** It is the only result that depends on the Nano-L : M : S capacity ratios. The model takes GEMM
# throughput proportional to the clock (1.78x and 3.65x). If a share x of Nano-M's GEMM time did not scale
# with the clock (DRAM stalls), both ends of the range would fall; the table shows the range for a few x.
# A share of about 0.1-0.15 would put both ends within tolerance, but the paper reports no latency at a second
# clock, so x could only be fitted on Fig. 9 itself - the model keeps x = 0 and the lower end stays a miss.

# %%
fig10_bounds = G.weak_scaling_bounds()
rec.add(pd.DataFrame([
    {"paper": "galaxy", "artifact": "Fig. 10", "model": r.model,
     "setting": f"env=C,{scaling_bw:g}Mbps,96 tokens/device,{r.devices} devices,{r.scheme}",
     "quantity": q, "value": getattr(r, q), "unit": "1"}
    for r in fig10_bounds.itertuples() for q in ("scaling_efficiency", "time_efficiency")]))
shares = (0.0, 0.15) if quick else (0.0, 0.1, 0.15, 0.2, 0.3)
fig9_sensitivity = G.clock_share_sensitivity(shares, models=("DistilBERT", "BERT-L") if quick else G.MODELS)
rec.add(pd.DataFrame([
    {"paper": "galaxy", "artifact": "Fig. 9", "model": "",
     "setting": f"{G.hetero_setting(bandwidth_mbps)},clock-independent share {r.clock_independent_share:g}",
     "quantity": q, "value": getattr(r, q), "unit": "x"}
    for r in fig9_sensitivity.itertuples() for q in ("speedup_min", "speedup_max")]))
fig9_sensitivity_chart = alt.Chart(fig9_sensitivity.melt(
    id_vars=["clock_independent_share"], value_vars=["speedup_min", "speedup_max"], var_name="end",
    value_name="speedup")).mark_line(point=True).encode(
    x=alt.X("clock_independent_share:Q", title="share of Nano-M GEMM time not scaling with the clock"),
    y=alt.Y("speedup:Q", title="Fig. 9 speedup range (x)"), color="end:N",
    tooltip=["clock_independent_share", "end", "speedup"],
).properties(title="Fig. 9 what-if (the model uses share 0)", width=360)
rec.chart(fig9_sensitivity_chart, "fig9_clock_share_sensitivity", data=fig9_sensitivity)
display(fig10_bounds)
fig9_sensitivity

# %% [markdown]
# ## Sec. IV-E: two Nano GPUs at 460 MHz, 500 Mbps
# Table V's numbers are held out, so these are model outputs only (GPU efficiency and budget are assumed).

# %%
gpu = G.gpu_environment(seq_len=seq_len)
rec.add(G.speedup_rows("Sec. IV-E", gpu, processor="gpu"))
gpu_long = gpu.melt(id_vars=["model"], value_vars=["speedup_over_mlm", "speedup_over_sp"], var_name="baseline",
                    value_name="speedup").dropna()
gpu_chart = alt.Chart(gpu_long).mark_bar().encode(
    x=alt.X("model:N", sort=list(G.MODELS)), y=alt.Y("speedup:Q", title="Galaxy speedup (x)"), color="baseline:N",
    xOffset="baseline:N", tooltip=["model", "baseline", "speedup"],
).properties(title="GPU environment (2 Nano GPUs @ 460 MHz, 500 Mbps)", width=360)
rec.chart(gpu_chart, "gpu_environment", data=gpu)
gpu[["model", "speedup_over_mlm", "speedup_over_sp", "galaxy_oom", "sp_oom", "galaxy_latency_s"]]

# %% [markdown]
# ## Algorithm 1 vs the exact optimum of Eq. 5
# Random heterogeneous 2-4 Nano clusters (random S/M/L modes, budgets 0.5-1.6 GB), the five models; the exact
# optimum is a MILP over integer heads and columns (HiGHS), checked against exhaustive enumeration in the tests.

# %%
gaps = G.planner_gap_study(6 if quick else 60, seed=0)
summary = pd.DataFrame([
    {"quantity": "mean_gap", "value": gaps.gap.mean()}, {"quantity": "max_gap", "value": gaps.gap.max()},
    {"quantity": "instances_feasible", "value": float(gaps.exact_feasible.sum())},
    {"quantity": "heuristic_fails_where_exact_fits", "value": float((~gaps.heuristic_feasible & gaps.exact_feasible).sum())},
])
rec.add(summary.assign(paper="galaxy", artifact="Algorithm 1", model="", unit="1",
                       setting=f"{len(gaps)} random 2-4 Nano clusters,seed=0"))
summary

# %% [markdown]
# ## Fidelity
# Every reported number with the modelled one. Known misses, and why:
# * **Fig. 9's lower end** (1.3x): the model's smallest heterogeneous speedup is about 1.48x (environment D,
#   over SP; the range spans both baselines - Sec. IV-C compares Galaxy with M-LM and SP, both splitting evenly
#   with the slowest device as straggler). The model takes CPU throughput proportional to clock frequency
#   (Nano-L = 1.78x Nano-M). A smaller real ratio (a clock-independent share of 10-15 % of the GEMM time) would
#   bring both ends within tolerance (the what-if above), but the paper has no number at a second clock to
#   fit it on without using Fig. 9 itself.
# * **Fig. 10** (81 % / 86 %): the model scales at about 100 %. Even with every ring step exposed and attention
#   not counted as work, it would scale at 88 % / 94 % (the bounds above), so the paper's loss is not wire time
#   or attention growth: it is a cost the paper does not describe (network-stack CPU time on the GEMM cores,
#   synchronisation jitter, per-tile framework overhead) and there is no number to model it with.
# * **Table I, OPT on the A100** is now a calibration row (the fp32 choice above); with fp16 tensor cores it
#   was 22 % low, because a fixed per-layer overhead plus the HBM weight stream cannot make OPT's larger layers
#   slower. The two A100 validation rows left, DistilBERT and GPT2-L, stay within 10 %.

# %%
board = scoreboard(reported, rec.table())
rec.write()
board[["artifact", "model", "setting", "quantity", "reported", "modelled", "relative_error", "tolerance",
       "within_tolerance", "role"]]

# %% [markdown]
# ## What if? (interactive only)
# Move the environment, the bandwidth, the sequence length and the model; the chart shows every scheme's latency.

# %%
if interactive:
    import ipywidgets as W

    env_w = W.Dropdown(options=list(G.ENVIRONMENTS), value=environment, description="env")
    bw_w = W.FloatLogSlider(value=bandwidth_mbps, base=10, min=1, max=4, description="Mbps")
    seq_w = W.IntSlider(value=seq_len, min=16, max=1024, step=4, description="tokens")
    model_w = W.Dropdown(options=list(G.MODELS), value=model, description="model")
    chart = alt.Chart(headline).mark_bar().encode(
        x=alt.X("latency_s:Q", title="latency (s)"), y=alt.Y("scheme:N", sort=None), color="oom:N",
        tooltip=["scheme", "latency_s", "oom", "galaxy_speedup"])
    view = alt.JupyterChart(chart.properties(width=460))

    def update(*_):
        proc = processor if env_w.value in G.HOMOGENEOUS else "cpu"
        frame = G.compare(model_w.value, env_w.value, bw_w.value, seq_w.value, proc)
        view.chart = chart.properties(data=frame, width=460,
                                      title=f"{model_w.value}, env {env_w.value}, {bw_w.value:.0f} Mbps, S={seq_w.value}")

    for w in (env_w, bw_w, seq_w, model_w):
        w.observe(update, names="value")
    display(W.VBox([W.HBox([env_w, bw_w]), W.HBox([seq_w, model_w]), view]))
