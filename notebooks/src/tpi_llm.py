# %% [markdown]
# # TPI-LLM: star all-reduce tensor parallelism and the sliding-window memory scheduler
# Reproduces Li et al., *TPI-LLM: Serving 70B-scale LLMs Efficiently on Low-resource Edge Devices*
# (`../shared/papers/tpi_llm.txt`): Tables 1-3, Fig. 1(b,c), 3, 5 and 6, and the example of Sec. 3.3.
#
# **One cost model.** Every number comes from the registered evaluators in `workbench/schemes/tpi_llm.py`:
# a timeline (`workbench.core.simulate`) of each device computing its share of every attention and FFN block,
# an all-reduce after each (star by default, costed by `workbench.machine.network` on the home-gateway tree:
# 4 links between devices), and - with the scheduler on - a loader per device that reads block k
# once block k - w has been released. Peak memory is read off the same timeline
# (gamma x resident block weights + runtime overhead + KV cache). The JAX kernel
# (`workbench/kernels/tpi_llm.py`) runs the same partition and is tested token-for-token against the reference.
#
# **Fitted vs validation.** Six constants are fitted, each on the rows named in `data/reported/tpi_llm.csv`
# (`fitted` column) and re-derived in the table near the end: gamma and the runtime overhead (Table 2,
# scheduler on, N = 8), the emulated disk rate (Table 1, Llama 2-70B, scheduler on, token latency), and the
# M1's swap rate, Accelerate-offload rate (Table 3, Llama 2-7B) and swap ceiling (Table 3's OOM cells). Two
# more are derived from the measured times quoted in Sec. 3.3 (the M1's weight-streaming and loading rates;
# those rows are calibration rows). Everything else is validation. The emulated device's streaming rate
# is no longer fitted: it is the M1's measured fraction of its DRAM peak applied to one
# Xeon Gold 5220R socket, the rule the Dell and Mac Air presets already use. The prompt length is no longer
# fitted: it is the released code's README example ("how are you?", 4 tokens), an assumption that barely
# matters because TTFT is bound by the master's first read of its weights (next paragraph).
#
# **When the loader starts (TTFT).** Alg. 1 tokenizes the prompt (line 2) and then starts the memory
# scheduler (line 3); Alg. 2's workers start theirs before the prompt arrives (line 2). In the released code
# `MemoryManager.start()` runs in the first forward pass, and with `--disable_memory_schedule` the same loader
# reads every block once, without a window ("the full weights are loaded into the memory at once", Sec. 4.1).
# So the master's first blocks (with the scheduler off: all of them) are read inside the first token, while the
# workers' first w blocks are resident when it arrives. This reproduces the paper's pattern that TTFT is about
# the same with and without the scheduler (Table 1's `ttft` rows, in the scoreboard at the end) without fitting a
# prompt length.

# %% tags=["parameters"]
figures_dir = None  # None -> the repository's figures/
interactive = True  # False in batch runs: the what-if widgets are skipped
quick = False  # True: two models, small sweeps (the test suite)
model = "Llama 2-70B"  # the model of Fig. 5 and the what-if section
devices = 8  # emulated devices (Sec. 4: 8)
window = 2  # memory window on the emulated testbed (Sec. 4.1: 2 by default)
laptop_window = 4  # memory window on the laptops (Sec. 3.3: a window of 4 in Sec. 4.4)
bandwidth_mbps = 300.0  # emulated link bandwidth (Sec. 4: 300 Mbps)
link_latency_ms = 1.0  # emulated per-link latency (Sec. 4: 1 ms; 4 links between two devices)
cores = 8  # cores per emulated device (Sec. 4: 8 logical cores)
testbed = "emulated"  # "emulated" or "laptops": the testbed of the what-if section
laptops = ["Mac Pro", "Mac Air", "Dell", "Dell"]  # Table 7; the first one is the master

# %%
import altair as alt
import pandas as pd

from workbench.report.display import setup_notebook
from workbench.report.fidelity import scoreboard
from workbench.model.models import get_model
from workbench.papers import tpi_llm as wb
from workbench.papers.charts import log_base
from workbench.report.results import Recorder

rec = Recorder(wb.PAPER, figures_dir)
setup_notebook(interactive)  # tables in human units (results.csv keeps full precision); live charts offline
get_model(model)
models = ("Llama 2-7B", "Llama 2-70B") if quick else wb.MODELS
laptop_models = ("Llama 2-7B",) if quick else wb.TABLE3_MODELS
emu = wb.emulated_cluster(devices, bandwidth_mbps, link_latency_ms, cores)
emu_suffix = wb.emulated_suffix(devices, bandwidth_mbps, link_latency_ms, cores)
lap_suffix = wb.laptop_suffix(laptops, laptop_window)
print(f"emulated: {emu.n} x {emu.devices[0].name}; laptops: {laptops}")

# %% [markdown]
# ## Table 1: TTFT, token latency and peak memory, scheduler off and on
# With the scheduler off, every device holds its share of all weights (OOM above 8 GB + 4 GB swap), read
# once by the loader inside the first token; with it on, the master streams the embedding, every block and
# the task head from disk each token.

# %%
t1 = wb.table1(models, emu, window)
rec.add(wb.table1_rows(t1, emu_suffix))
long1 = t1.melt(id_vars=["model", "setting", "oom"], value_vars=["ttft", "token_latency"], var_name="metric")
rec.chart(alt.Chart(long1[long1.oom == 0]).mark_bar().encode(
    x=alt.X("setting:N", title=None), y=alt.Y("value:Q", title="seconds"), color="setting:N",
    column=alt.Column("model:N"), row=alt.Row("metric:N"),
).properties(width=90, height=140, title="Table 1 (modelled)"), "table1", data=t1)
t1.round(3)

# %% [markdown]
# ## Table 2: peak memory per device vs devices (window 2)
# The timeline's peak equals Prop. 5 when the loader fills the window; the N dependence at N = 2 comes
# from FFN shares that outweigh the embedding (e.g. Llama 2-70B), which Prop. 5's w = 2 case ignores.

# %%
n_list = (2, 8) if quick else (2, 4, 6, 8)
t2 = wb.table2(models, n_list, window, bandwidth_mbps, link_latency_ms)
rec.add(wb.table2_rows(t2, wb.emulated_suffix(8, bandwidth_mbps, link_latency_ms, 8)))
rec.chart(alt.Chart(t2).mark_line(point=True).encode(
    x=alt.X("devices:O"), y=alt.Y("peak_memory:Q", scale=alt.Scale(type="log"), title="peak memory per device (GiB)"),
    color="model:N", strokeDash="scheduler:N",
).properties(width=360, height=240, title="Table 2 (modelled)"), "table2", data=t2)
t2.pivot(index="model", columns="setting", values="peak_memory").round(2)

# %% [markdown]
# ### Window 2 vs window 4: Prop. 5 against the loader
# Prop. 5 assumes the steady state: the loader keeps a window of w blocks ahead of compute. Here the
# master is load-bound (a block takes several times longer to read than to compute: the last column), so
# its loader never gets a block ahead and its peak (the embedding, the head and the block in flight) is
# the same at w = 2 and w = 4; the workers preload their first w blocks before the prompt (Alg. 2) and
# hold Prop. 5's window exactly. The released memory manager loads the same way (one block after another
# until the window is full, releasing blocks compute has passed), so the table's w = 4 peak, the master's,
# only grows where the master's disk keeps up.

# %%
wm = wb.window_memory_check(models[:3] if quick else models, (2,) if quick else (2, 8), (2, 4))
rec.add(wb.window_memory_rows(wm))
rec.chart(alt.Chart(wm).mark_bar().encode(
    x=alt.X("window:O"), y=alt.Y("simulated_peak_gib:Q", title="simulated peak (GiB)"),
    color="device:N", xOffset="device:N", column=alt.Column("model:N"),
    tooltip=["model", "devices", "window", "device", "simulated_peak_gib", "prop5_peak_gib", "master_loader_ahead"],
).properties(width=90, height=200, title="peak per device class, windows 2 and 4"), "window_memory", data=wm)
wm.round(3)

# %% [markdown]
# ### Fixed costs the rows cannot pin: sensitivity
# The star's master handles 2(n-1) messages per all-reduce (MXNet KVStore push/pull in the released
# code) and every PyTorch op pays a CPU dispatch (a few to tens of microseconds, quoted). Neither is in the
# paper; no row pins them. With the scheduler on, the loader binds the token, so both hide until the
# per-message time reaches milliseconds (the table); without it, every message is on the critical path (2L all-reduces x 2(n-1) + the
# broadcast's n-1 sends per token).

# %%
sens_fc = wb.fixed_cost_sensitivity(("Llama 2-7B",) if quick else ("Llama 2-7B", "Llama 2-70B"))
rec.add(wb.fixed_cost_sensitivity_rows(sens_fc))
rec.chart(alt.Chart(sens_fc[sens_fc.kernel_launch_us == sens_fc.kernel_launch_us.max()]).mark_line(point=True).encode(
    x=alt.X("message_overhead_ms:Q", title="per-message endpoint time (ms)"),
    y=alt.Y("relative_to_stored:Q", title="token latency / stored model"),
    color="model:N", strokeDash="scheduler:N",
).properties(width=360, height=220, title="TPI-LLM emulated token latency vs fixed costs"),
    "fixed_cost_sensitivity", data=sens_fc)

# %% [markdown]
# ## Table 3: the laptops (Transformers, Accelerate, Transformers + memory scheduler, TPI-LLM)
# The three single-device systems run on the master laptop; TPI-LLM splits heads equally (p_i = 1/4, Sec. 3.3).

# %%
t3 = wb.table3(laptop_models, laptops, laptop_window)
rec.add(wb.table3_rows(t3, lap_suffix))
rec.chart(alt.Chart(t3.dropna(subset=["token_latency"])).mark_bar().encode(
    x=alt.X("setting:N", title=None, sort=["Transformers", "Accelerate", "Transformers+MS", "TPI-LLM"]),
    y=alt.Y("token_latency:Q", scale=alt.Scale(type="log"), title="s/token"),
    y2=alt.datum(log_base(t3["token_latency"])), color="setting:N",
    column="model:N",
).properties(width=110, height=200, title="Table 3 (modelled; OOM cells missing)"), "table3", data=t3)
t3.pivot(index="model", columns="setting", values="token_latency").round(2)

# %% [markdown]
# ## Sec. 3.3: block times on the laptops and the steady-state conditions (Prop. 3, 4)

# %%
p4 = wb.prop4_example(laptops, laptop_window)
rec.add(wb.prop4_rows(p4) if lap_suffix == "" else wb.prop4_rows(p4).assign(setting=lambda d: d.setting + lap_suffix))
p4.round(2)

# %% [markdown]
# ## Fig. 1: why tensor parallelism, and why it is not enough
# (b) share of the token time spent communicating, TP vs MP, Llama 3.1-8B on the laptops at 178 Mbps;
# (c) memory per device vs tensor-parallel nodes without the scheduler: parameters / N vs the footprint.

# %%
f1 = wb.fig1ab(laptops=laptops)
rec.add(wb.fig1_rows(f1) if lap_suffix == "" else wb.fig1_rows(f1).assign(setting=lambda d: d.setting + lap_suffix))
f1c = wb.fig1c()
rec.add(wb.tidy_rows("Fig. 1(c)", f1c.assign(model="Llama 3.1-8B", setting="nodes=" + f1c.nodes.astype(str)),
                {"master_gib": "GiB", "theoretical_gib": "GiB"}))
fig1c_long = f1c.melt(id_vars="nodes", value_vars=["theoretical_gib", "master_gib", "worker_gib"], var_name="curve")
rec.chart(alt.Chart(fig1c_long).mark_line(point=True).encode(
    x="nodes:O", y=alt.Y("value:Q", title="memory per device (GiB)"), color="curve:N",
).properties(width=320, height=220, title="Fig. 1(c): Llama 3.1-8B, scheduler off"), "fig1c", data=f1c)
f1.round(3)

# %% [markdown]
# ## Fig. 3 and Sec. 3.2: link latency dominates the all-reduce
# A 4-byte all-reduce over the gateway tree: star crosses 8 links, a depth-2 tree 16, the ring 56.
# `t_data` is computed as the paper defines it (Prop. 1's proof): twice the sum over the links of one device's
# path to the master of 32|H| / B, i.e. per path, store-and-forward, no contention at the master, on the star
# path of Appendix A.7 (4 links at 300 Mbps) and on the depth-2 tree path of the paper's 16-tau example (below);
# the quoted `t_data` equals the formula over 2 links only, so it stays a miss. The cost model's own star bytes
# term (7 workers' messages share the master's link, in and out) is recorded beside it as `star_bytes_term`.

# %%
f3 = wb.fig3((1, 5) if quick else (1, 2, 4, 6, 8, 10))
rec.add(wb.sec32_rows())
rec.add(wb.tidy_rows("Fig. 3", f3.assign(model="", setting=f3.algorithm + ",tau=" + f3.tau_ms.map("{:g}ms".format)),
                {"latency_ms": "ms"}))
rec.chart(alt.Chart(f3).mark_line(point=True).encode(
    x=alt.X("tau_ms:Q", title="per-link latency tau (ms)"), y=alt.Y("latency_ms:Q", title="all-reduce latency (ms)"),
    color="algorithm:N",
).properties(width=320, height=220, title="Fig. 3: 4-byte all-reduce, 8 devices"), "fig3", data=f3)
wb.link_latency_hops()

# %%
from workbench.report.prose import say

t_data = wb.sec32_rows().set_index("quantity")["value"]
say("`t_data` for Llama 2-70B: {star:.1f} ms on the star path, {tree:.1f} ms on the depth-2 tree path; the cost "
    "model's star bytes term: {bytes_:.1f} ms.", star=t_data["t_data"], tree=t_data["t_data_tree_path"],
    bytes_=t_data["star_bytes_term"])

# %% [markdown]
# ## Fig. 5: token latency of Llama 2-70B vs devices, cores and bandwidth
# The emulated 70B run is load-bound (the master reads its share of the weights from disk every token), so the
# network and the cores barely matter; the paper's point that 300 Mbps -> 1 Gbps changes little holds (the
# change is printed below the chart). The paper also
# reports that more cores help; in this model they do not, because compute is hidden behind disk reads.

# %%
f5 = wb.fig5(model, (4, 8) if quick else (2, 4, 6, 8), (4, 8) if quick else (2, 4, 6, 8),
            (300, 1000) if quick else (100, 300, 500, 1000), window, link_latency_ms)
sens = wb.bandwidth_sensitivity(model, 300, 1000)
rec.add(wb.fig5_rows(f5, sens).assign(model=model))
rec.chart(alt.Chart(f5).mark_line(point=True).encode(
    x=alt.X("value:Q", title=None), y=alt.Y("token_latency:Q", title="s/token"),
    column=alt.Column("knob:N", header=alt.Header(title=None)),
).resolve_scale(x="independent").properties(width=170, height=180, title=f"Fig. 5: {model}"), "fig5", data=f5)
print(f"token latency change 300 -> 1000 Mbps: {sens:.1%}")

# %% [markdown]
# ## Fig. 6: TPI-LLM vs Standalone, MP and Galaxy (ring all-reduce) on the emulated testbed
# The paper's qualitative claims hold in the model: Standalone is OOM from 3B on, MP and Galaxy fit up to
# 13B, Galaxy's 56 link latencies per all-reduce make it slower than MP, and only TPI-LLM with the memory
# scheduler (MS) runs the 34B/70B models. Without MS, TPI-LLM is the fastest where it fits; with MS the
# emulated devices are disk-bound, so MP (weights resident) is faster than TPI-LLM + MS for small models
# in this model - the paper's figure has no numbers to check this against.

# %%
f6 = wb.fig6(models, emu, window)
rec.add(wb.fig6_rows(f6, emu_suffix))
rec.chart(alt.Chart(f6.dropna(subset=["token_latency"])).mark_bar().encode(
    x=alt.X("system:N", title=None), y=alt.Y("token_latency:Q", scale=alt.Scale(type="log"), title="s/token"),
    y2=alt.datum(log_base(f6["token_latency"])),
    color="system:N", column="model:N",
).properties(width=90, height=200, title="Fig. 6 (modelled; OOM bars missing)"), "fig6", data=f6)
f6.pivot(index="model", columns="system", values="token_latency").round(2)

# %% [markdown]
# ## One decode token on the timeline (Fig. 4's picture): Llama 2-7B, 4 devices, window 2

# %%
gantt = wb.token_gantt_frame("Llama 2-7B", 4, window)
rec.chart(alt.Chart(gantt).mark_bar().encode(
    x=alt.X("start:Q", title="ms into the token"), x2="end:Q", y=alt.Y("resource:N", sort=None), color="kind:N",
    tooltip=["name", "start", "end"],
).properties(width=520, height=160, title="first layers of a steady decode token"), "fig4_timeline", data=gantt)

# %% [markdown]
# ## Fitted constants, re-derived from the rows they were fitted on

# %%
if not quick:
    fits = wb.fitted_constants_table()
    display(fits)  # noqa: F821

# %% [markdown]
# ## What the reported latencies imply about the loader
# With the scheduler on, a device reads all of its blocks every token while it computes, so a reported token
# latency bounds its loader's rate from below: bytes per token / latency (fp32-equivalent bytes, as every
# loader rate here is). The model has one constant rate per testbed (lines: the emulated rate fitted on
# Llama 2-70B, the M1's derived from Sec. 3.3's quoted load times). Points far from their line are the
# misses below: they need a loader that is not constant-rate, and the paper says nothing that would set one.

# %%
rates = wb.implied_load_rates(models, laptop_models)
points = alt.Chart(rates).mark_point(filled=True, size=70).encode(
    x=alt.X("bytes_per_token_gb:Q", scale=alt.Scale(type="log"), title="bytes read per token (GB, fp32-equivalent)"),
    y=alt.Y("implied_rate_gb_s:Q", title="implied loader rate (GB/s)"), color="testbed:N", shape="artifact:N",
    tooltip=["artifact", "model", "setting", "reader", "reported_s", "implied_rate_gb_s", "modelled_rate_gb_s"])
lines = alt.Chart(rates).mark_rule(strokeDash=[4, 3]).encode(y="mean(modelled_rate_gb_s):Q", color="testbed:N")
rec.chart((lines + points).properties(width=420, height=240, title="loader rate each reported token latency implies"),
          "implied_load_rates", data=rates)
for testbed_name, group in rates.groupby("testbed"):
    print(f"{testbed_name}: implied {group.implied_rate_gb_s.min():.2f}-{group.implied_rate_gb_s.max():.2f} GB/s "
          f"vs modelled {group.modelled_rate_gb_s.iloc[0]:.2f} GB/s")
rates.round(3)

# %% [markdown]
# The same question as a fit: the loader rate is the one free constant behind these rows (TTFT and token
# latency with the scheduler, TTFT without it), so for each row the rates that put the model within the
# rows' tolerance form one interval. Where a testbed's intervals do not overlap, no value of that constant,
# fitted on any rows, meets the tolerance on all of them: the misses are in the data's shape, not in the fit. On the
# emulated testbed every row but Llama 2-13B's scheduler-on token latency would fit one rate a little above
# the one fitted on Llama 2-70B; choosing it would mean fitting on validation rows, so it is reported here
# and not used. On the Mac, Yi-34B's TTFT and its own token latency already need rates far apart (the table).

# %%
windows = wb.loader_rate_windows(0.25, models, laptop_models, quantities=("ttft", "token_latency"))
shown = windows.assign(rate_high_shown=windows["rate_high_gb_s"].clip(upper=20.0))  # open-ended: drawn to 20
bars = alt.Chart().mark_rule(strokeWidth=6).encode(
    x=alt.X("rate_low_gb_s:Q", scale=alt.Scale(type="log"), title="loader rate within 25 % (GB/s; open-ended to 20)"),
    x2="rate_high_shown:Q", y=alt.Y("row:N", sort=None, title=None, axis=alt.Axis(labelLimit=360)),
    color="testbed:N",
    tooltip=["artifact", "model", "setting", "reported_s", "rate_low_gb_s", "rate_high_gb_s", "modelled_rate_gb_s"])
ticks = alt.Chart().mark_tick(color="black", thickness=2).encode(x="modelled_rate_gb_s:Q", y=alt.Y("row:N", sort=None))
rec.chart(alt.layer(bars, ticks, data=shown).properties(width=380)
          .facet(row=alt.Row("testbed:N", title=None)).resolve_scale(y="independent")
          .properties(title="loader rates within 25 % of each reported latency (tick: the model's)"),
          "loader_rate_windows", data=windows)
common = wb.common_rate_window(windows)
for _, c in common.iterrows():
    verdict = "some rate fits every row" if c.feasible else "no single rate fits every row"
    print(f"{c.testbed}: rates {c.rate_low_gb_s:.2f}-{c.rate_high_gb_s:.2f} GB/s over {c.rows} rows -> {verdict}"
          + (f"; all but one would fit without: {c.feasible_without}" if c.feasible_without else ""))
windows.round(3)

# %% [markdown]
# ## Scoreboard for this notebook
# Where the model misses, and why (no constant was fitted to close any of these; each row's numbers are in the
# table above and rendered below):
# * **Llama 2-13B, scheduler on, token latency**: the paper's own TTFT for this run is what a cold read of the
#   master's fp32 weights at the rate the 70B/34B rows imply gives, and the README of the released code reports
#   the same per-token time; but no stated mechanism makes 13B's later tokens read twice as fast per byte as 7B's
#   or the 70B-scale models'. Sharper still: the masters of Llama 2-13B and Llama 3.1-8B read the same bytes per
#   token (the two squares at the same x above), yet the paper's two token latencies differ by half, so no loader
#   whose time depends on the bytes alone can match both rows.
# * **Llama 3.1-8B, TTFT off and on, token latency on**: all three are bound by the master's reads (its
#   128k-vocabulary embedding and head are over half of what it reads); the paper's numbers imply a faster read
#   than the rate Llama 2-70B gives, while Llama 3.1-70B with the same embeddings is close to it.
# * **Table 3, Transformers+MS (7B-34B) and TPI-LLM Llama 3.1-8B**: the loader rate the Mac's Transformers+MS
#   token latencies imply falls with the bytes it reads per token (the chart above: from about Sec. 3.3's rate for
#   3B to a fraction of it for Yi-34B), and the paper's slow-down over the model grows with the Mac master's
#   modelled peak footprint on an 8 GB laptop. Both point at the OS (page cache, memory pressure; Sec. 2 Q2), but
#   neither the memory left to the process nor the SSD's behaviour is stated, so it is not modelled. Accelerate's
#   3B TTFT has no mechanism: its reported TTFT - token gap is larger for 3B than for 7B and 8B.
# * **Sec. 3.2 t_data** and **Fig. 1(b)** TP communication share (the figure's "4 laptops of 8 cores" are not
#   Table 7's, whose Mac Air has 4).
#
# Not modelled, from the released code: block files keep the checkpoint's fp16/bf16 and are converted to fp32
# on load (`weight.float()`), so every storage rate here is a loader rate in fp32-equivalent bytes (the M1's
# rate derived from Sec. 3.3 is twice its file-read rate); the assumed Mac Air and Dell rates are used the
# same way.

# %%
board = scoreboard(wb.reported(), rec.table())
_ = rec.write()  # figures/tpi_llm/results.csv (no path in the page: a batch run writes to a staging folder)
print(f"{len(rec.table())} result rows recorded")
board = board[board.modelled.notna()]
summary = board.groupby(["artifact", "role"]).agg(rows=("reported", "size"),
                                                  within=("within_tolerance", lambda s: int((s == "yes").sum())))
display(summary)  # noqa: F821
board[board.within_tolerance == "no"][["artifact", "model", "setting", "quantity", "reported", "modelled",
                                        "relative_error"]].round(3)

# %%
misses = board[board.within_tolerance == "no"]
say("Rows outside their tolerance: {rows}.", rows="; ".join(
    f"{r.artifact} {r.model} {r.quantity} ({r.setting}): modelled {r.modelled:.3g}, reported {r.reported:.3g} "
    f"({r.relative_error:+.0%})" for r in misses.itertuples()) or "none")

# %% [markdown]
# ## What if? (interactive)
# Pick the testbed, model, window, devices, bandwidth, link latency and the laptops. A model that cannot
# fit even with a window of 1 reports why.

# %%
if interactive:
    import ipywidgets as widgets
    from IPython.display import display as show

    from workbench.core.errors import WorkbenchError

    w_testbed = widgets.ToggleButtons(options=list(wb.TESTBEDS), value=testbed, description="testbed")
    w_model = widgets.Dropdown(options=list(wb.MODELS), value=model, description="model")
    w_window = widgets.IntSlider(value=window, min=1, max=12, description="window")
    w_devices = widgets.IntSlider(value=devices, min=1, max=16, description="devices")
    w_bw = widgets.FloatLogSlider(value=bandwidth_mbps, base=10, min=1, max=4, description="Mbps")
    w_tau = widgets.FloatSlider(value=link_latency_ms, min=0, max=20, step=0.5, description="tau (ms)")
    w_laptops = widgets.SelectMultiple(options=["Mac Pro", "Mac Air", "Dell", "Dell #2"],
                                       value=["Mac Pro", "Mac Air", "Dell", "Dell #2"], description="laptops")
    out = widgets.Output()
    sweep_chart = alt.JupyterChart(alt.Chart(pd.DataFrame({"window": [], "token_latency": []})).mark_line())

    def update(_=None):
        names = [n.replace(" #2", "") for n in w_laptops.value]
        kw = dict(testbed=w_testbed.value, devices=w_devices.value, bandwidth_mbps=w_bw.value,
                  link_latency_ms=w_tau.value, laptops=names)
        with out:
            out.clear_output()
            try:
                show(wb.scenario(w_model.value, window=w_window.value, **kw).round(3))
                sweep = wb.window_sweep(w_model.value, windows=sorted({1, 2, 4, 8, w_window.value}), **kw)
                sweep_chart.chart = alt.Chart(sweep.melt(id_vars="window", value_vars=[
                    "token_latency", "timeline_memory", "prop5_memory"])).mark_line(point=True).encode(
                    x="window:Q", y="value:Q", color="variable:N").properties(width=380, height=200)
            except WorkbenchError as err:
                print(err)

    for w in (w_testbed, w_model, w_window, w_devices, w_bw, w_tau, w_laptops):
        w.observe(update, names="value")
    update()
    show(widgets.VBox([widgets.HBox([w_testbed, w_model]), widgets.HBox([w_window, w_devices]),
                       widgets.HBox([w_bw, w_tau]), w_laptops, out, sweep_chart]))

