# %% [markdown]
# # Your own hardware: profile -> deployment -> prediction -> verification -> calibrate
# This machine plays the user's device. The path is the one a researcher takes with their own boards
# (`docs/own_hardware.md` gives the commands in full):
#
# 1. **Profile** the device: `python -m workbench profile --out my_box.toml` writes a device file in which
#    every number is measured (rates, memory bandwidth and efficiency, per-kernel launch, per-layer time,
#    storage read rate); `python -m workbench profile network` measures the link a running program sees.
# 2. **Describe a deployment** that names the device file by path (`preset = "my_box.toml"`) and the link.
# 3. **Predict** with the arena (`python -m workbench whatif deploy.toml`).
# 4. **Verify**: run the same model across real processes (`python -m workbench cluster`) and hold the
#    prediction to the measurement.
# 5. **Calibrate** on your own rows (`python -m workbench calibrate deploy.toml measured.csv --fit ...`).
#
# Everything below reads one stored campaign of this machine (the `campaign` parameter: profile, co-location
# shares, sync chains and end-to-end runs measured back to back); nothing re-measures. The measured times are
# wall times of a shared 2-core machine: they differ run to run, and the last part of the notebook shows how
# much (the campaigns' history is in `docs/campaigns.md`). A process's device is its share of the machine.

# %% tags=["parameters"]
figures_dir = None  # None -> the repository's figures/
interactive = True  # False in batch runs
quick = False  # True: the test suite (the same small tables)
model = "TinyLlama-42M"  # the model of the stored end-to-end runs
campaign = "2026-11-25a"  # which stored campaign (profile, chains, shares and runs measured back to back)

# %%
import tempfile
from pathlib import Path

import altair as alt
import pandas as pd

from workbench.scenarios.calibrate import to_toml
from workbench.report.display import setup_notebook
from workbench.papers.charts import diagonal
from workbench.report.results import Recorder
from workbench.studies import cluster as stored
from workbench.studies import engine_runs as er
from workbench.studies import own_hardware as wb

rec = Recorder("own_hardware", figures_dir)
setup_notebook(interactive)  # tables in human units (results.csv keeps full precision); live charts offline
work = Path(tempfile.mkdtemp(prefix="own-hardware-"))  # the per-process device files the deployments name
if campaign not in wb.CAMPAIGNS:
    raise ValueError(f"campaign must be one of {sorted(wb.CAMPAIGNS)}, got {campaign!r}")
data_dir = wb.CAMPAIGNS[campaign]
print(f"campaign {campaign}: {data_dir}")

# %%
from workbench.report.prose import say, span

# %% [markdown]
# ## 1. Profile
# ### 1a. The device (measured)
# The profile of this machine as `profile` writes it: every constant with its unit and kind.

# %%
profile = wb.profile_table(data_dir)
profile[["constant", "value", "unit", "kind"]]

# %% [markdown]
# ### 1b. Co-located processes: each one's share of the machine (measured)
# The same programs in 1, 2 and 4 plain processes at once (`scripts/measure_collectives.py --only
# colocated`; `cluster/colocated.csv` of the campaign): TinyLlama-42M's decode layers and chains of 1 MiB and
# 16 MiB GEMVs, each process's median call. A process's share is its time alone over its time with the others;
# an even split would be 1/n. The deployments below give each process the decode layers' share.

# %%
stored.colocated_table(data_dir)

# %%
shares = stored.colocated_table(data_dir).query("program == 'decode_layers'").set_index("processes")["share"]
say("Two co-located processes running the decode layers each get {s2:.2f} of the machine, four {s4:.2f} "
    "(an even split: 0.50 and 0.25).", s2=shares[2], s4=shares[4])

# %% [markdown]
# ### 1c. The link a running program sees
# A decoder step runs its syncs inside one compiled program, each right after a layer's kernels, so the
# link's per-message time is measured there (`python -m workbench cluster -n 2 sync_chain`, or `profile
# network` on your own hosts): chains of steps in one program, each step a star all-reduce (`bare`), a small
# GEMM then the star (`after compute`), a GEMV streaming a matrix of its own from memory then the star
# (`after streaming`), or TPI-LLM's own tensor-parallel decoder layer with its two star syncs (`in decoder
# layers`), each less the same steps without the star. The slope over the chain's length is one sync, without
# the program's dispatch and first wait that a single call pays. Each kind's 2-process chains fit the
# per-message time o and the per-byte cost beta (a shaped class also its wire latency L); its 4-process chains
# test that fit with the CPU work stretched by processes / cores (`collectives.colocated_link`). Each deployment takes
# the chains fitted at its own process count: the network profiled as deployed (`stored.deployed_link`); a
# campaign that measured decoder-layer chains deploys them for both phases (`stored.phase_sync_for`).

# %%
chains = stored.chain_table(data_dir)
chains[["syncs", "link_class", "processes", "message_bytes", "per_sync_s", "predicted_s", "error", "role"]]

# %%
two = chains[(chains.link_class == "loopback") & (chains.processes == 2)].sort_values("message_bytes")
per_kind = two.groupby("syncs", sort=False).first()
stretch = chains[(chains.link_class == "loopback") & (chains.role == "validation")
                 & (chains.syncs != "bare")].groupby("syncs")["error"]
say("On 2 loopback processes at the smallest message one sync costs {costs}. The stretched 2-process fit "
    "predicts the 4-process chains with errors of {errors}: why each deployment takes chains measured at its "
    "own count.",
    costs=", ".join(f"{r.per_sync_s * 1e3:.2f} ms {kind}" for kind, r in per_kind.iterrows()),
    errors=", ".join(f"{span(e, '+.0%')} {kind}" for kind, e in stretch))

# %% [markdown]
# ## 2. A deployment that names the device file
# Two processes on loopback; the link's per-message endpoint time, wire latency and bandwidth are those of
# section 1c; `[cluster] shared_machine` says the devices are processes of this one machine, so the master's
# serial work (embedding, head, host work), which runs while the others wait at their next sync, is costed on
# the whole machine rather than on the master's share.

# %%
print(to_toml(wb.deployment(2, "loopback", work, model, data_dir=data_dir)))

# %% [markdown]
# ## 3. Prediction, and 4. verification against real processes
# Every stored end-to-end run of the campaign (2 and 4 processes, loopback and a tbf-shaped link) beside the
# arena's `tpi_star_tp_resident` on its deployment. The model has no scheduler, so it is held to the fastest run
# (`latency_s`: the fastest TTFT of the repeats; per token, the median over repeats of each generation's
# fastest step); the typical run (`typical_s`, medians) is beside it with its own error: the gap between the
# two is the scheduler's waits on this 2-core VM.

# %%
checked = wb.verify(work, model, data_dir=data_dir)
summary = wb.error_summary(checked)
points = alt.Chart(checked.assign(case=checked.link_class + ", " + checked.devices.astype(str) + " proc, "
                                  + checked.phase)).mark_point(filled=True, size=90).encode(
    x=alt.X("latency_s:Q", scale=alt.Scale(type="log"), title="measured (s)"),
    y=alt.Y("predicted_s:Q", scale=alt.Scale(type="log"), title="predicted by the arena (s)"),
    color="link_class:N", shape="phase:N", tooltip=["case", "latency_s", "predicted_s", "error"])
exact = diagonal("latency_s", "predicted_s", pd.concat([checked.latency_s, checked.predicted_s]))
rec.chart(alt.layer(points, exact).properties(width=360, height=300,
                                              title=f"{model}: measured vs predicted (dashed diagonal = exact)"),
          "measured_vs_predicted", data=checked)
summary

# %%
overall = summary.set_index("points").loc["all"]
say("Over the campaign's {n} points the prediction's median |error| is {fast:.0%} against the fastest runs "
    "and {typical:.0%} against the typical ones (the target: at most 15 %).",
    n=int(overall.n), fast=overall.median_abs_error, typical=overall.median_abs_error_typical)

# %%
checked[["link_class", "devices", "phase", "tokens", "latency_s", "typical_s", "predicted_s", "error",
         "error_typical", "repeats"]]

# %% [markdown]
# ### Where the predicted time goes, and what it leaves out
# The arena's breakdown of each prediction (compute on the process's share of the machine, the master's
# serial work on the whole machine, the link's per-message and per-byte time) and the measured time it does
# not explain.

# %%
checked[["link_class", "devices", "phase", "latency_s", "predicted_s", "compute_s", "memory_s", "serial_s",
         "comm_link_latency_s", "comm_bytes_s", "fixed_s", "unexplained_s"]]

# %%
decode = checked[checked.phase == "decode"]
say("Per decode step the master's serial work is predicted at {serial} on the whole machine; the link's "
    "per-message time is {link} of the {predicted} predicted.",
    serial=span(decode.serial_s * 1e3, ".2g", "ms"), link=span(decode.comm_link_latency_s * 1e3, ".2g", "ms"),
    predicted=span(decode.predicted_s * 1e3, ".2g", "ms"))

# %% [markdown]
# ## 5. Calibrate on your own rows
# The 2-process loopback TTFT fits the per-message endpoint time; the per-token row of the same runs is
# validation, never fitted. When one constant cannot serve both rows, the validation error says so.

# %%
calibrated = wb.calibration(work, model, data_dir)
calibrated[["phase", "role", "latency_s", "before_s", "after_s", "error_before", "error_after",
            "fitted_message_overhead_us"]]

# %%
held_out = calibrated[calibrated.role == "validation"].iloc[0]
say("Fitting the per-message time ({o:.0f} us) on the TTFT row moves the held-out per-token row's error from "
    "{before:+.0%} to {after:+.0%}.", o=held_out.fitted_message_overhead_us, before=held_out.error_before,
    after=held_out.error_after)

# %% [markdown]
# ## This VM's campaigns: how far one campaign's numbers can be trusted
# The rest is about this machine rather than the user's path. Its speed drifts, so each stored campaign
# measured its profile, the co-location shares, the sync chains and the end-to-end runs back to back
# (`docs/campaigns.md` records when, under what protocol, and what each found).
#
# ### Every campaign's runs against every campaign's profile
# The diagonal is the protocol (the headline above uses `campaign`), the off-diagonal what a stale profile
# costs (a profile without decoder chains deploys the older chains). Nothing in any is fitted on an
# end-to-end row.

# %%
campaigns = wb.campaign_table(work, model)
campaigns

# %%
same = campaigns[campaigns.same_campaign]
stale = campaigns[~campaigns.same_campaign]
say("Profiled and run in one sitting, the campaigns' median |error| spans {same}; with another campaign's "
    "profile, {stale}.", same=span(same.median_abs_error * 100, ".0f", "%"),
    stale=span(stale.median_abs_error * 100, ".0f", "%"))

# %% [markdown]
# ### How far one campaign's error moves: repeats of the latest
# Repeats of the latest campaign on loopback (2 and 4 processes; profile, shares, chains and runs back to back,
# each right after the previous: `data/cluster/campaigns/*-drift<k>/`), each verified on its own profile. They
# are reported beside the headline, which stays the latest campaign. The spread of a point's error over the
# repeats is what one campaign's number can say.

# %%
drift = wb.drift_table(work, model)
drift_summary = wb.drift_summary(drift)
drift_summary

# %%
drift

# %%
by_count = drift_summary.groupby("devices").agg(lo=("error_min", "min"), hi=("error_max", "max"))
per_repeat = drift.groupby("campaign", sort=False)["error"].apply(lambda e: e.abs().median())
say("Over the repeats the error of a 2-process point runs from {lo2:+.0%} to {hi2:+.0%}, of a 4-process point "
    "from {lo4:+.0%} to {hi4:+.0%}; the median |error| of each repeat's loopback points is {each}, of all "
    "{n} points {all_:.0%}.", lo2=by_count.lo[2], hi2=by_count.hi[2], lo4=by_count.lo[4], hi4=by_count.hi[4],
    each=", ".join(f"{e:.0%}" for e in per_repeat), n=len(drift), all_=drift.error.abs().median())

# %% [markdown]
# The 2-process sync is a small difference of two large slopes (the decoder layers with and without their
# syncs), so a repeat whose layers run slower or faster moves the per-sync estimate, and the deployment with
# it. A repeat whose larger syncs cost no more than its small ones fits no per-byte cost; the deployment then
# takes the largest bandwidth it accepts, as `profile network` does. Nothing is fitted on an end-to-end row.

# %% [markdown]
# ### Which link: every choice, side by side
# The same runs under each way of choosing the link (which chains' syncs; fitted on the 2-process chains
# and stretched, or at the deployment's own count) and the master's serial work (on its share, or on the
# whole machine). None is fitted on an end-to-end row; the first row is an earlier session's model on
# these runs, the last the one used above when the campaign measured decoder chains.

# %%
choices = wb.link_choice_table(work, model, data_dir)
choices

# %% [markdown]
# ## Distributed engines on this machine: model vs engine
# The engines people deploy, run here across shaped links (`python -m workbench engines run llama.cpp
# --processes 3 --link-mbit 100`, `engines run distributed-llama ...`: one network namespace per process, a
# `tc tbf` rate on every link) and stored in `data/engines/*_runs.csv`. Each row sits beside the scheme that
# models that engine on the same deployment (this machine's llama.cpp profile per process, the link's rate).
# Bytes per token are read from every link's interface counters; llama.cpp's are compared as RPC payload (the
# wire less 66 bytes of headers a packet). The prediction costs the link as tbf shapes it: a token bucket per
# port and direction (`network.token_bucket_time`), which passes a message no larger than its bucket at once and
# lets the two directions refill apart. Time is held to the model only where communication is at least half of it
# and every process had a vCPU (spinning processes sharing this machine's two vCPUs are timed by the scheduler).

# %%
engines = er.side_by_side(er.stored_runs())
engines[["case", "phase", "seconds_per_token", "predicted_seconds_per_token", "time_error", "measured_bytes",
         "predicted_bytes_per_token", "bytes_error", "bytes_as", "comm_share", "load_1min"]]

# %%
if not engines.empty:
    engine_points = alt.Chart(engines).mark_point(filled=True, size=90).encode(
        x=alt.X("seconds_per_token:Q", scale=alt.Scale(type="log"), title="measured (s/token)"),
        y=alt.Y("predicted_seconds_per_token:Q", scale=alt.Scale(type="log"), title="predicted by the scheme (s/token)"),
        color=alt.Color("engine_build:N", title="engine"), shape=alt.Shape("phase:N"),
        opacity=alt.Opacity("time_held:N", title="comm >= half, a vCPU each",
                            scale=alt.Scale(domain=[True, False], range=[1.0, 0.3])),
        tooltip=["case", "phase", "seconds_per_token", "predicted_seconds_per_token", "contention"])
    engine_exact = diagonal("seconds_per_token", "predicted_seconds_per_token",
                            pd.concat([engines.seconds_per_token, engines.predicted_seconds_per_token]))
    rec.chart(alt.layer(engine_points, engine_exact).properties(
        width=360, height=300, title="distributed engines: time per token (dashed = exact)"),
        "engines_time", data=engines)

# %%
if not engines.empty:
    decode = engines[engines.phase == "decode"]
    held = engines[engines.time_held]
    crowded = engines[engines.oversubscribed]
    payload = decode[decode.bytes_as == "RPC payload"]
    equal, logged = er.dllama_logged_bytes_equal()
    say("llama.cpp's RPC payload per token is {bytes_} off the model's over {n} decode rows; distributed-llama's "
        "root logged the scheme's Sent / Recv kB exactly on {equal} of {logged} rows (its veth bytes, TCP/IP headers "
        "and ACKs included, are in the table, not compared). "
        "Time per token is {time_} off where communication is at least half the time on a vCPU per process "
        "({held} rows; {within} of them within 25 %, median |error| {median:.0%}). On the {crowded} rows whose "
        "spinning processes shared the vCPUs, repeats of one deployment differ up to {spread:.1f}x and the "
        "prediction is {crowd_err} off: the scheduler, not the link, sets that time.",
        n=len(payload), equal=equal, logged=logged,
        bytes_=span(payload.bytes_error * 100, "+.2f", "%") if len(payload) else "n/a (no packet counts)",
        time_=span(held.time_error * 100, "+.0f", "%"),
        held=len(held), within=int((held.time_error.abs() <= 0.25).sum()), median=held.time_error.abs().median(),
        crowded=len(crowded),
        spread=crowded.groupby(["case", "phase"]).seconds_per_token.agg(lambda v: v.max() / v.min()).max()
        if len(crowded) else float("nan"),
        crowd_err=span(crowded.time_error * 100, "+.0f", "%") if len(crowded) else "n/a")

# %%
rec.add(er.result_rows(engines))

# %%
rec.add(wb.result_rows(profile, checked, summary, calibrated, chains, choices, campaigns, drift))
_ = rec.write()  # figures/own_hardware/results.csv (no path in the page: a batch run writes to a staging folder)
print(f"{len(rec.table())} result rows recorded")
