# %% [markdown]
# # A real multi-process cluster on this machine: collectives and TPI-LLM, measured vs modelled
# The workbench's kernels are SPMD programs. Here they run across real operating-system processes that
# exchange data over real sockets with JAX's own distributed runtime (`jax.distributed` + gloo CPU
# collectives), started by `python -m workbench cluster`. Links are either loopback or, as root, one
# network namespace per process joined to a bridge with every port rate-limited by `tc tbf`
# (`--shape 125mbit`).
#
# **Everything below reads stored measurements** (`data/cluster/`, written by
# `scripts/measure_collectives.py`): re-running this notebook never re-measures. The numbers describe
# *this* machine (2 cores shared with other users), not any paper's hardware.
#
# The model is the workbench's own, with fixed costs: every collective costed as gloo and
# XLA really run it (`workbench.machine.network`'s `gloo_ring` and `gloo_halving_doubling`, the TPI-LLM kernel's
# ppermute star / ring / tree), a per-message endpoint time beside the wire, the measured per-call dispatch,
# and the scheduler's tick when more processes than cores must act at once. The end-to-end TPI-LLM run is
# compared with the **arena's** TPI-LLM scheme on this machine's measured preset.

# %% tags=["parameters"]
figures_dir = None  # None -> the repository's figures/
interactive = True  # False in batch runs: widgets are skipped
quick = False  # True: fewer chart panels (the test suite)
star_question_processes = 4  # star vs ring is asked at this many processes or more
small_message_bytes = 2048  # what counts as a small message
live_check = False  # True: also start a real 2-process cluster now (psum smoke test)

# %%
import altair as alt
import pandas as pd

from workbench.report.display import setup_notebook
from workbench.studies import cluster as wb
from workbench.report.results import Recorder

rec = Recorder("cluster", figures_dir)
setup_notebook(interactive)  # tables in human units (results.csv keeps full precision); live charts offline
info = wb.machine_info()
print(f"machine: {info['machine']} (jax {info['jax']})")
for part, run in sorted(info["runs"].items()):
    print(f"  {part:12s} measured {run['date']}, load average before {run['load_avg_before']}, "
          f"after {run['load_avg_after']}, {run['minutes']} min")
print("caveat:", info["caveat"])

# %% [markdown]
# ## 0. Fixed costs of this machine (measured)
# `scripts/measure_collectives.py --only micro` (about half a minute) writes `data/cluster/microbench.csv`
# and the preset `data/devices/this_machine_cpu.toml`. Besides the GEMM / GEMV / streaming rates it
# measures the fixed costs the model needs: the per-call dispatch of a trivial jitted function
# (`jit_dispatch`) and of a compiled program (`program_dispatch`, the intercept of the next line), the
# per-kernel cost inside one compiled program (`kernel_launch`: the slope over K of one jitted program of K
# dependent 8x8 matmuls, one XLA CPU thunk each), the per-layer time beyond a layer's kernels
# (`layer_overhead`: the slope over L of L tiny decoder layers in one program, minus 7 launches), numpy's
# per-op time and `memory_efficiency` (the streaming rate of a chain of distinct 16 MiB `v @ W` GEMVs in one
# program, how a layer streams its weights, vs the best read-only rate). The machine
# is shared and was busy, so each is the minimum over 30 interleaved batches.

# %%
preset = wb.cpu_preset()
fixed_names = ["kernel_launch", "layer_overhead", "program_dispatch", "jit_dispatch", "numpy_op",
               "memory_efficiency", "mem_DRAM_bandwidth", "peak_flops_fp32"]
fixed = pd.DataFrame([{"constant": k, "value": float(preset.provenance[k].value), "unit": preset.provenance[k].unit,
                       "kind": preset.provenance[k].kind} for k in fixed_names])
fixed

# %%
bench = pd.read_csv(wb.CLUSTER_DIR / "microbench.csv")
bench[bench.benchmark.isin(["jit_dispatch", "kernel_chain", "tiny_layers", "numpy_op"])][
    ["benchmark", "size", "seconds"]].assign(microseconds=lambda d: d.seconds * 1e6)

# %% [markdown]
# Inside one compiled program a kernel costs about a microsecond and a tiny layer a few: the fixed cost on
# this CPU sits in *calling* a program (tens of microseconds) and, below, in every message a collective
# hands to gloo.

# %% [markdown]
# ## 1. Calibration: per-message endpoint time, wire latency and per-byte cost
# Per call of a program on n processes with m bytes per process (`workbench.measure.cluster.collectives.model_time`):
# dispatch (measured) + endpoint messages x o + steps x L + busiest bytes x beta + the scheduler wait.
# Steps, messages and bytes come from `workbench.machine.network.collective_cost` for the algorithm the runtime
# runs: psum = gloo's segmented ring (2 or more segments per rank, so a small all-reduce handles twice the
# ideal ring's messages; a buffer that fills fewer segments than there are ranks goes round the ring hop by
# hop, 2(n-1) hops with two processes at each: `collectives.tiny_ring_hops`), all_gather = gloo's ring in half blocks, psum_scatter = gloo's
# ReduceScatterHalvingDoubling (log2 n rounds of data + notification, then a distribution round; only the
# data is waited for in turn, the notifications once at the end, so a round costs one message's o), the
# ppermute star / ring / tree = the TPI-LLM kernel's collective-permutes.
# **Fitted rows:** the *2-process psum* of each link class only: on loopback o and beta (no wire: the
# kernel's loopback path is endpoint software, in o); on a shaped class L and beta with loopback's o
# (same runtime, same machine). **Every other point is validation.** The statistic is the median over
# calls (section 3 says why). Stored in `data/constants/cluster.toml` (kind =
# fitted, `fitted_on` names the rows; `scheduler_tick` = 1 / CONFIG_HZ, read from the kernel, not fitted);
# the table refits from the CSV and the test suite checks the two agree.

# %%
fits = wb.fit_table()
fits

# %% [markdown]
# For the shaped classes the fitted bandwidth can be read against the configured tbf rate
# (`fitted_over_nominal_bandwidth`): the per-byte cost is a measurement of what the token bucket,
# TCP and gloo together deliver, not an input.

# %% [markdown]
# ## 2. Every algorithm and size: measured vs the model
# Black: measured; orange: the workbench model; the core's ring, tree and star with the fitted link alone
# (per-message o, L, beta; no dispatch, no scheduler) are drawn for reference.

# %%
comparison = wb.collective_comparison()
long = wb.comparison_long(comparison)
panels = comparison[["link_class", "program"]].drop_duplicates()
if quick:
    panels = panels.head(2)
long = long.merge(panels, on=["link_class", "program"])
series = ["measured", "workbench model", "ring (core, link only)", "tree (core, link only)", "star (core, link only)"]
chart = alt.Chart(long).mark_line(point=True).encode(
    x=alt.X("message_bytes:Q", scale=alt.Scale(type="log", base=2), title="message (B)"),
    y=alt.Y("latency_s:Q", scale=alt.Scale(type="log"), title="latency (s)"),
    color=alt.Color("series:N", scale=alt.Scale(domain=series,
                                                range=["black", "#ff7f0e", "#1f77b4", "#2ca02c", "#d62728"])),
    strokeDash=alt.StrokeDash("processes:O"),
    tooltip=["link_class", "program", "processes", "message_bytes", "series", "latency_s"],
).properties(width=200, height=150).facet(row="link_class:N", column="program:N")
rec.chart(chart, "collectives_measured_vs_model", data=long)

# %%
table_columns = ["link_class", "processes", "program", "message_bytes", "reps", "statistic", "measured_s", "median_s",
                 "p25_s", "p75_s", "min_s", "dispatch_s", "alloc_s", "message_s", "wire_s", "bytes_s", "wait_s", "pred_s",
                 "model_algorithm", "rel_error", "role"]
comparison[[c for c in table_columns if c in comparison]]

# %% [markdown]
# ## 3. How far off is the model, and why
# The median relative error |predicted - measured| / measured over **all validation points** (every size,
# program and process count; the 2-process psum rows used for the fit are excluded), then the same number
# for the earlier model without fixed costs (one alpha per traversal of the ideal algorithm, `legacy_predict`),
# each refitted on the same calibration rows, on every stored campaign (`before`; `docs/campaigns.md` says
# when and how each was measured). The tables of this section are of `data/cluster/collectives.csv`; the
# campaign with OSU's repetitions follows below.

# %%
validation = wb.validation_tables(comparison)
overall = validation["overall"]
print(f"validation ({comparison.statistic.iloc[0]}): {int(overall.points[0])} points, median relative error "
      f"{overall.median_rel_error[0]:.0%}, 90th percentile {overall.p90_rel_error[0]:.0%}, "
      f"within 20 %: {overall.within_20pct[0]:.0%} of the points")
before = wb.before_after()
before

# %%
validation["by_link"]

# %%
validation["by_size"]

# %%
validation["by_program"]

# %%
gaps = wb.model_gap_table(comparison, cores=int(info["cpu_count"]))
gaps

# %%
err = comparison[comparison.role == "validation"].assign(
    measured_over_predicted=lambda d: d.measured_s / d.pred_s)
err_chart = alt.Chart(err).mark_point(filled=True).encode(
    x=alt.X("message_bytes:Q", scale=alt.Scale(type="log", base=2), title="message (B)"),
    y=alt.Y("measured_over_predicted:Q", scale=alt.Scale(type="log"), title="measured / predicted"),
    color="program:N", shape="processes:N", tooltip=[c for c in table_columns if c in err],
).properties(width=300, height=200).facet(column="link_class:N")
rec.chart(err_chart, "validation_measured_over_predicted",
          data=err[[c for c in table_columns if c in err] + ["measured_over_predicted"]])

# %% [markdown]
# ### Two modes: the scheduler tick
# Small messages at 4 and 8 processes show two modes (`p25` near the network cost, `p75` one or more scheduler
# ticks above it; the kernel's tick is 1 / CONFIG_HZ, `scheduler_tick`, read from the kernel, not fitted). With
# more processes than the 2 cores, a process that must act while another holds its core runs at the next tick
# at the latest; a ring or gloo step needs every process, a star step only the master and one worker (which fit
# on 2 cores). The table gives, per process count and program, the fastest call, the quartiles and the median of
# the small-message points, the model's expected wait and the spread in ticks:

# %%
ticks = wb.tick_table(comparison, float(wb.cluster_constants()["scheduler_tick"].value))
ticks

# %%
from workbench.report.prose import say, span

tick = float(wb.cluster_constants()["scheduler_tick"].value)
fresh_page = float(wb.cluster_constants()["fresh_page"].value)
say("This kernel's scheduler tick is {tick:.0f} ms; a fresh 4 KiB page costs {page:.1f} us to fault in "
    "(`fresh_page`, measured), {buffer:.0f} ms for a 64 MiB buffer.", tick=tick * 1e3, page=fresh_page * 1e6,
    buffer=fresh_page * (64 * 2**20 / 4096) * 1e3)

# %% [markdown]
# Reading it: at 4 and 8 processes the fastest call of a ring-like program is well under the median and
# the quartiles are one or more ticks apart: each call either runs through or waits for the scheduler.
# The star's steps need only two processes, so it keeps its sub-millisecond fastest calls (section 4).
# At 2 processes (= cores) the model charges no wait, yet where other users' processes took the cores the
# upper quartile of small points sits a tick up too: the same mechanism with someone else's processes, which no
# per-point constant of a campaign can describe. Where it hits the calibration rows (the 2-process psum), the
# fitted wire latency of that link class absorbs the tick and over-predicts the other 2-process programs on it
# (`gaps`).
#
# **Fresh pages.** Every call allocates its own output (XLA's CPU client, `AlignedMalloc` per execution),
# and a reduce-scatter also copies its input into a temporary and builds gloo's halving-doubling object with
# two zero-filled vectors of the whole buffer. glibc serves a block above its mmap threshold (dynamic, at
# most 32 MiB on 64-bit: `DEFAULT_MMAP_THRESHOLD_MAX`) with a fresh mapping and unmaps it on free, so such a
# buffer is new memory on every call and each 4 KiB page faults (the kernel zeroes it) when first written
# (`fresh_page`, `host.fresh_page_seconds`, above). That is the `alloc_s` column; it is what brings the
# largest buffers' rows onto the smaller buffers' trend.
#
# **Which statistic.** The median of a small message is decided by whether more than half of its calls
# met a tick, and which program that happens to changes from run to run on this VM, at any placement the
# launcher offers (`--pin-cores`, `--keep-cores-awake`). So the model is
# held to two statistics. The **median** with the expected wait above. The **fastest call** (`min_s`,
# best of N, as the device micro-benchmarks are): a call no tick delayed, so no wait, but two mechanisms
# every call pays: (1) with more processes acting in a step than cores, the endpoints' software (o) and,
# on loopback, the kernel's copies (beta) share the cores: a / C times longer (`cpu_share`); (2) a tbf link
# passes the first `burst` bytes of a call at the veth's rate (the bucket the launcher configures, 64 KiB
# up to a few ticks of traffic, full at the start of a call that waited for nothing; `LinkModel.bytes_time`), so the
# fitted shaped rate is the configured rate less TCP/IP framing, not a rate inflated by the bucket. Both
# are refitted on the same 2-process psum rows; no validation point is dropped under either statistic.

# %%
fastest = wb.fastest_call_comparison()
fastest_validation = wb.validation_tables(fastest)
print(f"fastest call (min_s): {int(fastest_validation['overall'].points[0])} validation points, median relative "
      f"error {fastest_validation['overall'].median_rel_error[0]:.0%}, within 20 %: "
      f"{fastest_validation['overall'].within_20pct[0]:.0%}")
fastest_validation["by_size"]

# %%
fastest_gaps = wb.model_gap_table(fastest, cores=int(info["cpu_count"]))
fastest_gaps

# %% [markdown]
# ### OSU's repetitions: the latest campaign
# A point timed with few calls (5-25, the earlier protocol) keeps the tick modes: with more processes than cores
# its fastest call often still met a tick, and its median sits in whichever mode more than half of the calls
# fell. The OSU Micro-Benchmarks time 1000 calls of a collective up to 8 KiB and 100 above (`util/osu_util.h`:
# `COLL_LOOP_SMALL`, `COLL_LOOP_LARGE`, `LARGE_MESSAGE_SIZE`). The latest campaign (`wb.latest_collectives_dir()`,
# `scripts/measure_collectives.py --only micro collectives --protocol osu_full --max-load 1`) times every point
# that way, each started once the load average was below 1, with this machine's micro-benchmarks measured just
# before it; it was declared the headline before it ran. The model is the same for every campaign and refitted
# on the same calibration rows (each link class's 2-process psum); nothing is tuned to them. Every campaign's
# before -> after is in `before` above (`median_calls` says how many calls a point's statistic is over).

# %%
latest_dir = wb.latest_collectives_dir()
latest = wb.fastest_call_comparison(latest_dir)
latest_validation = wb.validation_tables(latest)
headline = before[before.model.str.startswith("after")].pivot_table(
    index=["campaign_name", "median_calls"], columns="statistic", values="median_rel_error", sort=False)
print(f"latest campaign ({latest_dir.name}), fastest call: {int(latest_validation['overall'].points[0])} validation "
      f"points, median relative error {latest_validation['overall'].median_rel_error[0]:.1%}, within 20 %: "
      f"{latest_validation['overall'].within_20pct[0]:.0%}")
headline

# %%
latest_validation["by_program"].pivot_table(index="program", columns="processes", values="median_rel_error")

# %%
latest_err = latest[latest.role == "validation"].assign(measured_over_predicted=lambda d: d.measured_s / d.pred_s)
latest_columns = ["link_class", "processes", "program", "message_bytes", "reps", "measured_s", "pred_s",
                  "measured_over_predicted", "rel_error"]
latest_chart = alt.Chart(latest_err).mark_point(filled=True).encode(
    x=alt.X("message_bytes:Q", scale=alt.Scale(type="log", base=2), title="message (B)"),
    y=alt.Y("measured_over_predicted:Q", scale=alt.Scale(type="log"), title="fastest call: measured / predicted"),
    color="program:N", shape="link_class:N", tooltip=latest_columns,
).properties(width=220, height=180).facet(column="processes:N").properties(
    title=f"{latest_dir.name}: fastest call of each validation point (OSU repetitions)")
rec.chart(latest_chart, "latest_campaign_fastest_call", data=latest_err[latest_columns])

# %%
after = before[before.model.str.startswith("after") & (before.campaign_name == headline.index[-1][0])]
by_count = latest_validation["by_program"].groupby("processes")["median_rel_error"].median()
legacy = before[before.model.str.startswith("before") & (before.campaign_name == headline.index[-1][0])]
say("In the latest campaign ({name}) the fastest call's median |error| over the {n} validation points is "
    "{fast:.1%} ({within:.0%} within 20 %); the median call's {median:.1%}; the earlier model, refitted "
    "on the same rows: {legacy}. Per process count (median over programs): {per_count}.",
    name=latest_dir.name, n=int(latest_validation["overall"].points[0]),
    fast=latest_validation["overall"].median_rel_error[0], within=latest_validation["overall"].within_20pct[0],
    median=float(after[after.statistic == "median_s"].median_rel_error.iloc[0]),
    legacy=" / ".join(f"{e:.0%} ({s})" for s, e in zip(legacy.statistic, legacy.median_rel_error)),
    per_count=", ".join(f"{e:.0%} at {n}" for n, e in by_count.items()))

# %% [markdown]
# Reading it: the more calls a point gets, the less its statistic depends on which calls met a tick (`headline`
# by `median_calls`). Two mechanisms are counted without a fitted constant. The compiled program's own memory:
# XLA gives each execution one temp block (`memory_analysis().temp_size_in_bytes`, stored per program and process
# count in `data/cluster/xla_buffers.csv` by `scripts/xla_buffers.py`), and the star kernel keeps all 2(n-1) of
# its collective-permute outputs there; above glibc's mmap threshold that block is fresh memory every call, and
# all processes fault their pages at once, n / cores to a core (the page time is measured, the block compiled).
# What stays off is 8 processes on 2 cores: the all-gather and gloo's halving-doubling reduce-scatter sit above
# the CPU-sharing model at small sizes, and the ppermute ring's slicing and adds are not costed (XLA's cost
# analysis gives the ring and the tree about the same bytes accessed, so a memory-traffic term would not single
# the ring out). A call ends with its slowest process, so it is scheduler-free only if none of the eight, four per
# core, met a tick in it. No constant is fitted to these rows, and the deployments here keep to 2 and 4 processes.

# %% [markdown]
# **How many calls does the fastest call need?** A diagnostic, declared before it ran: every program at 32 B on
# 8 loopback processes, 3000 calls each, back to back (`scripts/measure_collectives.py --only bestofn`,
# `data/cluster/campaigns/*-bestofn/`). The table gives the fastest of the first N calls beside the model's
# scheduler-free call (the capped OSU campaign's fit, nothing refitted) and that campaign's fastest call with the
# calls it had. No validation row changes.

# %%
best_of = wb.best_of_n_table()
best_of

# %%
ratio = best_of.set_index("program")
say("With 3000 calls the fastest call over the model's is {ratios}; the campaign's fastest call (with "
    "{calls} calls) was {over} times what 3000 calls find.",
    ratios=", ".join(f"{r:.2f} ({p})" for p, r in ratio.fastest_3000_over_model.items()),
    calls=span(ratio.campaign_calls, ".0f"), over=span(ratio.campaign_over_fastest, ".2f"))

# %% [markdown]
# Reading it: the fastest call keeps falling until a few hundred to a thousand calls, so a capped campaign's
# fastest call sits above it. With enough calls the tree, the psum and the star are near where the model puts
# them; the all-gather and the reduce-scatter level off above it (a mechanism is missing there), and the ppermute
# ring falls below the model (why is not known). So the 8-process miss is partly the statistic's sample size and
# partly the model; the uncapped campaign re-measures every point, not the 8-process ones alone.

# %% [markdown]
# **Does the fit depend on which program calibrates it?** The same fit on the 2-process ppermute star (a
# ping-pong: the point-to-point primitive every kernel here is written with) instead of gloo's psum, each
# statistic, validated on the points neither calibrates:

# %%
choices = wb.calibration_choices()
choices

# %% [markdown]
# The fastest-call fit finds about the same per-message time from either program, and about the same
# validation error: it measures the runtime and the link. The median and mean fits absorb the calibration
# program's tick mode (the small psum's median sits on a tick more often than the star's), so their o
# differs several-fold with the program chosen, and so does their validation error. The stored constants
# (`data/constants/cluster.toml`, used by the arena and `whatif`) stay the psum's median fit, as declared
# before these runs; this table is why a user of another machine should calibrate on the fastest calls of
# a ping-pong and add the scheduler's expected wait separately.

# %% [markdown]
# **What is still off** (`fastest_gaps`, `gaps`): on loopback, buffers of 1 MiB and more are copied and
# reduced by the CPU at rates the 2-process psum's beta does not carry to other programs (psum_scatter and
# the star at 64 MiB); small messages on 4 and 8 processes scatter by tens of percent around the model
# (the CPU sharing is an average over steps, the scheduler's order is not); and the medians keep the tick
# modes no per-point constant describes.

# %% [markdown]
# ## 4. Does the star all-reduce beat ring on small messages at 4+ processes here?
# Measured star (TPI-LLM's, `ppermute`) vs gloo's ring (`psum`) and vs the like-for-like ring written
# with `ppermute`, messages up to `small_message_bytes`, at `star_question_processes` processes or more.

# %%
star_ring = wb.star_ring_table(max_bytes=small_message_bytes, min_processes=star_question_processes)
wins = star_ring.groupby(["link_class", "processes"]).agg(
    points=("star_s", "size"), star_beats_psum_ring=("star_beats_psum_ring", "sum"),
    star_beats_ppermute_ring=("star_beats_ppermute_ring", "sum"),
    median_star_over_psum_ring=("star_over_psum_ring", "median"),
    median_star_over_ppermute_ring=("star_over_ppermute_ring", "median")).reset_index()
wins

# %%
star_long = star_ring.melt(id_vars=["link_class", "processes", "message_bytes"],
                           value_vars=["star_over_psum_ring", "star_over_ppermute_ring"],
                           var_name="versus", value_name="ratio")
star_points = alt.Chart().mark_point(filled=True, size=90).encode(
    x=alt.X("message_bytes:O", title="message (B)"),
    y=alt.Y("ratio:Q", scale=alt.Scale(type="log"), title="star / ring (measured)"),
    color="versus:N", shape="versus:N",
    tooltip=["link_class", "processes", "message_bytes", "versus", "ratio"])
parity = alt.Chart().mark_rule(strokeDash=[4, 3], color="gray").encode(y=alt.datum(1.0))
star_chart = alt.layer(star_points, parity, data=star_long).properties(width=170, height=130).facet(
    column="link_class:N", row="processes:O").properties(title="below the dashed line (1): star is faster")
rec.chart(star_chart, "star_vs_ring_small", data=star_ring)

# %%
n_points = len(star_ring)
print(f"at >= {star_question_processes} processes and <= {small_message_bytes} B: star faster than gloo's ring "
      f"(psum) in {int(star_ring.star_beats_psum_ring.sum())} of {n_points} points "
      f"(median ratio {star_ring.star_over_psum_ring.median():.2f}), faster than the ppermute ring in "
      f"{int(star_ring.star_beats_ppermute_ring.sum())} of {n_points} "
      f"(median ratio {star_ring.star_over_ppermute_ring.median():.2f})")

# %% [markdown]
# TPI-LLM's argument (2 link traversals instead of 2(n-1)) assumes the master receives its n-1
# messages concurrently; written with `ppermute` each receive is its own operation, so on this
# runtime the star also makes 2(n-1) sequential sends, as many as the ring. Where it still wins
# here, the reason is different: each star send involves only the master and one worker, while each
# ring step needs *all* n processes to run, which on 2 cores means waiting for the scheduler to get
# round to every one of them. The measurement answers the question for this machine; it is not
# evidence for the paper's link-latency argument.

# %% [markdown]
# ## 5. End to end: TPI-LLM on 4 processes vs the arena
# `python -m workbench cluster --processes 4 tpi_llm` runs `workbench.kernels.tpi_llm`'s SPMD backbone
# (star all-reduces) with random weights; only process 0 embeds, applies the head and picks tokens. The
# tokens are compared with the single-process reference (`generate_greedy`); a CI test checks the same on
# a tiny config. Runs on loopback and, as root, on links shaped to 100 Mbit (`--shape 100mbit`), with
# 4 processes (TPI-LLM's setting, twice the cores) and with 2 (one process per core).
#
# The prediction is **the arena's**: `workbench.measure.cluster.predict` builds a cluster of n shares of this
# machine's measured preset (`this_machine_cpu`: GEMM rate, read bandwidth, kernel launch, per-layer time;
# each process gets 1/n of the rates, or the measured co-located share, and its fixed costs stretch by
# processes / cores; the master's serial work runs on the whole machine, `Cluster.shared_machine`) joined by
# a link with the fitted beta, L and per-message o of the run's link class, and evaluates it with the
# TPI-LLM scheme the arena registers (`evaluate_tpi`; options: weights resident, even split, star, fp32).

# %%
e2e = wb.e2e_table()
e2e.T

# %%
for row in e2e.itertuples():
    print(f"{row.model:14s} {row.link_class:12s} per token: measured {row.measured_per_token_s * 1e3:7.2f} ms, "
          f"arena {row.predicted_per_token_s * 1e3:7.2f} ms (measured / arena {row.per_token_measured_over_predicted:.2f}); "
          f"TTFT: measured {row.measured_ttft_s * 1e3:7.2f} ms, arena {row.predicted_ttft_s * 1e3:7.2f} ms "
          f"({row.ttft_measured_over_predicted:.2f})")

# %%
between = e2e[["ttft_between_fastest_and_typical", "per_token_between_fastest_and_typical"]].to_numpy()
print(f"measured between the scheduler-free and the median-fitted prediction: {int(between.sum())} of {between.size}")
e2e[["model", "link_class", "processes", "measured_ttft_s", "predicted_fastest_ttft_s", "predicted_ttft_s",
     "measured_per_token_s", "predicted_fastest_per_token_s", "predicted_per_token_s"]]

# %% [markdown]
# ### The link a running program sees, and the fastest step
# A decoder step's syncs run inside one compiled program, each after a layer's kernels. Chains of 1, 8
# and 32 steps in one program (`python -m workbench cluster -n 2 sync_chain`; data/cluster/sync_chain.csv)
# measure that: the slope over the chain's length is one step, without the program's dispatch and the
# first wait that a single call pays. A step is a bare star all-reduce; or a small cache-resident GEMM then
# the star, less the GEMMs alone (`after compute`: a prefill layer's sync); or a GEMV that streams a
# matrix of its own from memory then the star, less the GEMVs alone (`after streaming`: a decode layer's
# sync, the weights a TinyLlama-42M layer streams per sync on 2 processes). Each kind's
# 2-process chains fit o and beta (and a shaped class's L and beta, the chain's syncs sharing one tbf
# bucket); its 4-process chains are validation of that fit with the CPU work stretched by processes /
# cores (`collectives.colocated_link`: every process must run to reach a sync after work).
#
# The end-to-end prediction (`deployed_link`) therefore takes, for each phase, the chains of the sync its
# layers end in (prefill: after compute; decode: after streaming), fitted **at the deployment's own process
# count** where chains were measured there (the network profiled as deployed, as `profile network` does on
# real hosts; the stretch then reproduces the chain it was fitted on), else at 2 processes. The
# generation's head computes the last position's logits only (as engines do in a prefill, and as the
# scheme's post block costs it). The arena is held to the *fastest* run (the model has no scheduler: TTFT's fastest
# repeat, and per token the median over repeats of each generation's fastest step).

# %%
chains = wb.chain_table()
chains[["syncs", "link_class", "processes", "message_bytes", "per_sync_s", "predicted_s", "error", "role"]]

# %%
loop2 = chains[(chains.link_class == "loopback") & (chains.processes == 2)].sort_values("message_bytes")
first = loop2.groupby("syncs", sort=False).first()
stretched = chains[(chains.role == "validation") & chains.syncs.isin(["after compute", "after streaming"])]
say("On 2 loopback processes at the smallest message one sync costs {costs}. Stretched to 4 processes, the "
    "2-process fit's error is {errors}.",
    costs=", ".join(f"{r.per_sync_s * 1e3:.2f} ms {kind}" for kind, r in first.iterrows()),
    errors=", ".join(f"{span(g.error, '+.0%')} {kind} ({link})"
                     for (kind, link), g in stretched.groupby(["syncs", "link_class"])))

# %%
e2e[["model", "link_class", "processes", "measured_fastest_ttft_s", "predicted_program_ttft_s", "ttft_program_error",
     "measured_fastest_per_token_s", "predicted_program_per_token_s", "per_token_program_error"]]

# %% [markdown]
# Reading it: the arena is evaluated twice, with the link constants fitted on the median calls (stored in
# `data/constants/cluster.toml`, what `whatif` and the arena use) and with the same fit on the fastest calls
# (section 3). A real program's sync sits between the two: it meets the scheduler's tick less often than
# the isolated psum's median and more often than its fastest call, and the data cannot say how often in
# advance (section 3). Two mechanisms the arena's scheme does not contain are visible besides:
#
# * **the tbf bucket** (section 3): the prompt's 64 KiB messages at 100 Mbit pass at the veth's rate, so
#   TTFT at 100 Mbit is faster than both predictions; the arena's link has no bucket (real Wi-Fi and
#   Ethernet links do not shape this way, so it is not added to the core);
# * **the scheduler inside a running program**: a step's syncs wait for cores the co-located processes'
#   runtime threads hold; the per-sync chains measure that at the deployment's count, but not how it
#   varies from run to run (`notebooks/own_hardware.ipynb` shows the arena's breakdown of each run and
#   the time it leaves unexplained).
#
# The processes are co-located, so the master's serial work (embedding, head, host work), which runs while
# the others wait, is costed on the whole machine (`Cluster.shared_machine`), not on its share.
#
# These are reported here rather than fitted away: no constant is fitted on an end-to-end row.

# %% [markdown]
# ## 5b. Two more papers' kernels across processes: Galaxy's stack and the MCU head-wise stack
# `python -m workbench cluster --processes N galaxy_stack -p scheme=galaxy_hmp` runs Galaxy's partitioned
# block (HMP, Megatron TP or SP: `workbench.kernels.galaxy.program`) and `mcu_stack` the MCU paper's
# head-wise block with its hierarchical reduce (`workbench.kernels.mcu_siracusa.stack_program`), one
# prefill of one block, on one device per process; every process checks its gathered output against the
# reference block (`matches_reference`). Per call the slowest process counts. The prediction is the
# arena's registered scheme (`workbench.measure.cluster.predict.predict_scheme`) on shares of this machine's preset,
# with the median-fitted link (against the median call) and the fastest-call fit (against the fastest call).

# %%
stacks = wb.stack_table()
stacks

# %% [markdown]
# ## 6. Accelerator roofline
# `workbench/kernels/accelerator.py` predicts per-layer prefill and decode latency with a roofline for a device
# preset: per operator of the unfused reference block, the larger of FLOPs / (peak x efficiency) and
# bytes / (bandwidth x memory efficiency), plus the device's fixed cost for each kernel the operator
# launches (one per weight matrix, three for attention, one per norm, rotary application, activation and
# residual add, and a decode step's K/V-cache copy), and times the reference block under `jax.jit` on the
# current backend. Below: first this CPU against its micro-benchmarked preset, then a lent H100 80GB HBM3
# against `data/devices/h100_sxm_measured.toml`.

# %%
accel = wb.accelerator_table()
accel

# %% [markdown]
# Reading the CPU rows: the decode layers are memory-bound, and the preset streams them at the read rate
# times `memory_efficiency`, measured on a chain of distinct `v @ W` GEMVs (the product every kernel here
# computes; on XLA's CPU backend it streams slower than `W @ v` or a single large GEMV), and a kernel smaller
# than the size the runtime splits across cores streams at one core's rate (`small_kernel_bytes`,
# `core_stream_bandwidth`: a sweep of GEMV chains). The prefill layers are compute-bound; a GEMM of M rows runs
# at M / (M + `gemm_half_rows`) of the best square-GEMM rate, from (M x 1024) @ (1024 x 1024) chains at
# M = 32, 128, 512. The machine's own bandwidth moves between runs on this shared host
# (`data/cluster/microbench.csv` keeps each run's rates). No preset constant is fitted on these rows (they are
# the validation of the roofline).

# %%
say("`gemm_half_rows` = {h:.1f} rows; measured / predicted over the CPU layers: {ratio}, median "
    "|r - 1| {median:.3f}.", h=preset.gemm_half_rows, ratio=span(accel.measured_over_predicted, ".2f"),
    median=(accel.measured_over_predicted - 1).abs().median())

# %% [markdown]
# ### The lent H100
# `scripts/measure_accelerator.py` on a lent GPU (`data/accelerator/h100_sxm/`): the reference block of every
# paper model, prefill at 128 tokens (and 512 for the TinyLlamas), one decode step at 128 cached tokens, in bf16
# and fp32, 8 blocks of distinct weights per jitted call (a layer as it runs in a model, without a call's
# dispatch per layer), calls rotating over weight sets of at least 256 MiB (so the L2 cache does not hold a
# small model's layer). The measured preset takes the datasheet's peaks and bandwidth and measures the rest on
# microbenchmarks, never on these layers: memory efficiency (a 1 GiB read), GEMM efficiency (an 8192-cube
# GEMM), the per-kernel cost (a chain of K dependent small matmuls) and the skinny-GEMM row loss (fitted on the
# 512-8192-row GEMM microbenchmarks). The bf16 single-call rows measured before a dtype fix of the reference
# block (its attention scale promoted the scores to fp32) are kept and marked in `layers_single_call.csv`.

# %%
gpu = wb.gpu_layer_table()
gpu_summary = wb.gpu_layer_summary(gpu)
gpu_summary

# %%
gpu

# %% [markdown]
# The model's kernel count beside the kernels XLA compiled for two single blocks on the H100
# (`hlo_samples.tar.gz`; the per-row counts of the first runs missed instructions with tuple results, so
# they are kept only as `kernels_single_result`).

# %%
gpu_kernels = wb.gpu_kernel_samples()
gpu_kernels

# %% [markdown]
# Reading the H100 rows: a layer with at least 64 MiB of weights (`size_class` large) is predicted by
# streaming plus the kernels' fixed cost; a small layer (BERT-base, the TinyLlamas, MiniLM, MobileBERT) takes
# about the same time whatever its size, well above the prediction: its kernels cost more each than the
# small-matmul chain measured (the layers' kernels are Triton softmax and norm fusions and cuBLASLt matmuls,
# and XLA rewrites small bf16 GEMVs into a multiply and a reduce; `gemv_chain.csv`). That per-kernel cost is
# not fitted on these rows; it stays a stated miss.

# %%
rows = gpu_summary.set_index(["phase", "size_class"])
say("Median |error| of the large layers: {dl:.0%} in decode, {pl:.0%} in prefill; of the small ones: "
    "{ds:.0%} in decode, {ps:.0%} in prefill (median measured / predicted of the small layers: {ratio}).",
    dl=rows.loc[("decode", "large"), "median_abs_error"], pl=rows.loc[("prefill", "large"), "median_abs_error"],
    ds=rows.loc[("decode", "small"), "median_abs_error"], ps=rows.loc[("prefill", "small"), "median_abs_error"],
    ratio=span(gpu[gpu.size_class == "small"].groupby("phase").measured_over_predicted.median(), ".1f"))

# %%
rec.add(wb.result_rows(comparison=comparison, fits=fits, validation=overall, star_ring=star_ring, e2e=e2e, accel=accel,
                       before=before, stacks=stacks, choices=choices, chains=chains, gpu=gpu, gpu_summary=gpu_summary,
                       gpu_kernels=gpu_kernels, latest=latest, best_of=best_of))
_ = rec.write()  # figures/cluster/results.csv (no path in the page: a batch run writes to a staging folder)

# %%
if live_check:
    from workbench.measure.cluster import run_cluster

    live = run_cluster("hello", 2)
    print(live.link_class, live.rows[["process", "psum"]].to_dict("records"))

# %% [markdown]
# ## What if: the fitted model for other per-message times, bandwidths and process counts
# Sliders change the per-message endpoint time o, the bandwidth and the process count; the chart shows the
# core's ring, tree and star all-reduce (link only) over message sizes beside this machine's measured psum
# and star.

# %%
if interactive:
    import ipywidgets as widgets
    import numpy as np
    from IPython.display import display

    from workbench.machine.network import collective_latency

    sizes = np.array([4 * 8**k for k in range(9)], dtype=float)
    loop = fits.set_index("link_class").loc["loopback"]

    def whatif_frame(o_us: float, bandwidth_mb_s: float, processes: int) -> pd.DataFrame:
        parts = []
        for algorithm in ("ring", "tree", "star"):
            t = collective_latency(algorithm, "all_reduce", processes, sizes, bandwidth_mb_s * 1e6, 0.0,
                                   message_overhead=o_us * 1e-6)
            parts.append(pd.DataFrame({"message_bytes": sizes, "latency_s": t, "series": f"{algorithm} model"}))
        meas = comparison[(comparison.link_class == "loopback") & (comparison.processes == processes)
                          & comparison.program.isin(["psum", "star"])]
        parts.append(pd.DataFrame({"message_bytes": meas.message_bytes, "latency_s": meas.measured_s,
                                   "series": "measured " + meas.program}))
        return pd.concat(parts, ignore_index=True)

    def whatif_chart(frame: pd.DataFrame) -> alt.Chart:
        return alt.Chart(frame).mark_line(point=True).encode(
            x=alt.X("message_bytes:Q", scale=alt.Scale(type="log", base=2), title="message (B)"),
            y=alt.Y("latency_s:Q", scale=alt.Scale(type="log"), title="all-reduce latency (s)"),
            color="series:N").properties(width=420, height=260)

    o_slider = widgets.FloatLogSlider(value=float(loop.message_overhead_s * 1e6), base=10, min=0, max=4,
                                      description="o (us)")
    bw_slider = widgets.FloatLogSlider(value=float(loop.bandwidth_bytes_per_s / 1e6), base=10, min=0, max=4,
                                       description="bandwidth (MB/s)")
    n_slider = widgets.SelectionSlider(options=[2, 4, 8], value=4, description="processes")
    live_chart = alt.JupyterChart(whatif_chart(whatif_frame(o_slider.value, bw_slider.value, n_slider.value)))

    def update(_change=None) -> None:
        live_chart.chart = whatif_chart(whatif_frame(o_slider.value, bw_slider.value, n_slider.value))

    for w in (o_slider, bw_slider, n_slider):
        w.observe(update, names="value")
    display(widgets.VBox([o_slider, bw_slider, n_slider]), live_chart)
