# %% [markdown]
# # Your own hardware, measured: profile -> calibrate -> predict -> verify
# This machine plays the user's device. The path is the one a researcher takes with their own boards:
#
# 1. **Profile** it: `python -m workbench profile --out my_box.toml` writes a device file in which every
#    number is measured (rates, memory bandwidth and efficiency, per-kernel launch, per-layer time, storage
#    read rate). The stored profile of this machine is `data/devices/this_machine_cpu.toml`.
# 2. **Describe a deployment** that names the device file by path (`preset = "my_box.toml"`), with the link
#    measured by `python -m workbench profile network`.
# 3. **Predict** with the arena (`python -m workbench whatif deploy.toml`).
# 4. **Verify**: the same model run across 2 and 4 real processes (`python -m workbench cluster`), on
#    loopback and on a 100 Mbit tbf-shaped link, measured against the prediction.
# 5. **Calibrate** on your own rows (`python -m workbench calibrate deploy.toml measured.csv --fit ...`).
#
# Everything below reads stored measurements (`data/`, dated, with the machine); nothing re-measures. The
# measured times are wall times of a shared 2-core machine: they differ run to run, and the notebook says
# how much. A process's device is its share of the machine (1/n of the compute and the bandwidth).

# %% tags=["parameters"]
figures_dir = None  # None -> the repository's figures/
interactive = True  # False in batch runs
quick = False  # True: the test suite (the same small tables)
model = "TinyLlama-42M"  # the model of the stored end-to-end runs

# %%
import tempfile
from pathlib import Path

import altair as alt

from workbench.calibrate import to_toml
from workbench.papers import own_hardware as wb
from workbench.results import Recorder

rec = Recorder("own_hardware", figures_dir)
work = Path(tempfile.mkdtemp(prefix="own-hardware-"))  # the per-process device files the deployments name

# %% [markdown]
# ## 1. The profile (measured)

# %%
profile = wb.profile_table()
profile[["constant", "value", "unit", "kind"]]

# %% [markdown]
# ## 2. A deployment that names the device file, and 3. the arena's prediction
# Two processes on loopback; the link's per-message endpoint time, wire latency and bandwidth are the
# fitted loopback class of `data/constants/cluster.toml`.

# %%
print(to_toml(wb.deployment(2, "loopback", work, model)))

# %% [markdown]
# ## 4. Measured vs predicted
# Every stored end-to-end run (2 and 4 processes, loopback and 100 Mbit) beside the arena's
# `tpi_star_tp_resident` on its deployment. The target is a median |error| of at most 15 %.

# %%
checked = wb.verify(work, model)
summary = wb.error_summary(checked)
rec.chart(alt.Chart(checked.assign(case=checked.link_class + ", " + checked.devices.astype(str) + " proc, "
                                   + checked.phase)).mark_point(filled=True, size=90).encode(
    x=alt.X("latency_s:Q", scale=alt.Scale(type="log"), title="measured (s)"),
    y=alt.Y("predicted_s:Q", scale=alt.Scale(type="log"), title="predicted by the arena (s)"),
    color="link_class:N", shape="phase:N", tooltip=["case", "latency_s", "predicted_s", "error"],
).properties(width=360, height=300, title=f"{model}: measured vs predicted (diagonal = exact)"),
    "measured_vs_predicted", data=checked)
summary

# %%
checked[["link_class", "devices", "phase", "tokens", "latency_s", "predicted_s", "error", "repeats"]]

# %% [markdown]
# ## 5. Calibrate on your own rows
# The 2-process loopback TTFT fits the per-message endpoint time; the per-token row of the same runs is
# validation, never fitted. When one constant cannot serve both rows, the validation error says so.

# %%
calibrated = wb.calibration(work, model)
calibrated[["phase", "role", "latency_s", "before_s", "after_s", "error_before", "error_after",
            "fitted_message_overhead_us"]]

# %%
rec.add(wb.result_rows(profile, checked, summary, calibrated))
path = rec.write()
print(f"wrote {path} ({len(rec.table())} rows)")
