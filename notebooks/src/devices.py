# %% [markdown]
# # The device library: the boards people own, one decode step on each, and a cluster of each
# The library (`data/devices/edge_*.toml`) describes the edge devices people run LLMs on. Every constant carries
# its kind and source: peaks are *derived* from the cores' published micro-architecture (cores x FLOP per cycle x
# clock), the DRAM peak from the memory type and bus width, and the *achieved* streaming rate is *quoted* from a
# published memory benchmark of that device (sbc-bench's tinymembench runs or STREAM, one thread), so each
# preset's `memory_efficiency` is the quoted rate over the datasheet peak. What no public source gave is
# `assumed`, and section 3 shows what each assumed constant moves. Engines' published token rates are
# validation only: nothing here is set or fitted from them.
#
# 1. The library side by side: peaks, datasheet vs achieved bandwidth, power.
# 2. One board alone: the decode prediction (tokens/s) of a few common models, and energy per token.
# 3. The sensitivity of that prediction to each `assumed` constant.
# 4. A cluster of each board (one scheme on the board's own link class, `data/constants/links.toml`): the device
#    count where the decode latency stops falling.

# %% tags=["parameters"]
figures_dir = None  # None -> the repository's figures/
interactive = True  # False in batch runs
quick = False  # True: the test suite (fewer models and device counts)
models = "Llama 3.1-8B,Llama 2-3B,OPT-L"  # comma-separated registered models: an 8B, a 3B and a 1B-class
weight_format = "q4_0"  # weights' format (workbench.scenarios.userconfig.WEIGHT_FORMATS)
scheme = "dllama_allgather_tp"  # the cluster's scheme (section 4)
max_devices = 16  # the largest cluster of section 4
sensitivity_factor = 2.0  # each assumed constant is divided and multiplied by this (fractions capped at 1)

# %%
import math

import altair as alt
import pandas as pd

from workbench.scenarios.arena import evaluate
from workbench.core.constants import load_constants
from workbench.report.display import setup_notebook
from workbench.core.fields import declared_fields
from workbench.machine.hardware import DEVICES_DIR, DeviceSpec, load_device, preset_table
from workbench.model.models import get_model
from workbench.machine.network import LINK_CLASSES, LINK_CLASSES_PATH, Link, Topology, link_class
from workbench.report.prose import say, span
from workbench.report.results import Recorder, result_rows
from workbench.schemes import Cluster, Workload, load_all
from workbench.studies.devices import sensitivity_chart
from workbench.scenarios.userconfig import WEIGHT_FORMATS

rec = Recorder("devices", figures_dir)
setup_notebook(interactive)
MODEL_NAMES = [m.strip() for m in models.split(",") if m.strip()][:1 if quick else None]
if weight_format not in WEIGHT_FORMATS:
    raise ValueError(f"weight_format must be one of {sorted(WEIGHT_FORMATS)}, got {weight_format!r}")
if not 2 <= int(max_devices) <= 64:
    raise ValueError(f"max_devices must be an integer in [2, 64], got {max_devices!r}")
if not sensitivity_factor > 1:
    raise ValueError(f"sensitivity_factor must be > 1, got {sensitivity_factor!r}")
REGISTRY = load_all()
if scheme not in REGISTRY:
    raise ValueError(f"scheme must be one of {sorted(REGISTRY)}, got {scheme!r}")
EDGE = sorted(p.stem for p in DEVICES_DIR.glob("edge_*.toml"))
DEVICES = {d: load_device(d) for d in EDGE}
WEIGHT_BITS = WEIGHT_FORMATS[weight_format]
COUNTS = [1, 2, 4, 8, 16] if quick else list(range(1, int(max_devices) + 1))
print(f"{len(EDGE)} library devices; models {', '.join(MODEL_NAMES)} in {weight_format}")


# %%
def value(device: DeviceSpec, key: str) -> float:
    """A preset constant's value (NaN when the preset does not state it), for the library table."""
    constant = device.provenance.get(key)
    return float(constant.value) if constant is not None else math.nan


def library_row(device_id: str) -> dict:
    """One library device: class, peaks, datasheet and achieved bandwidth, efficiency and its kind, power, link."""
    d = DEVICES[device_id]
    peak_bw = d.memory[-1].bandwidth_bytes_per_s
    return {"device": d.name, "id": device_id, "class": d.device_class,
            **{f"peak_{t}_gops": d.peak_flops.get(t, math.nan) / 1e9 for t in ("fp32", "fp16", "int8")},
            "dram_peak_gb_s": peak_bw / 1e9, "achieved_gb_s": value(d, "achieved_stream_bandwidth") / 1e9,
            "streaming_gb_s": peak_bw * d.memory_efficiency / 1e9, "memory_efficiency": d.memory_efficiency,
            "efficiency_kind": d.provenance["memory_efficiency"].kind, "power_w": d.power_w or math.nan,
            "memory_gib": d.memory_bytes / 2**30, "link_class": preset_table(device_id)["meta"]["link_class"]}


library = pd.DataFrame([library_row(d) for d in EDGE])
library

# %% [markdown]
# ## 1. Datasheet vs achieved bandwidth
# The light bar is the DRAM peak (transfer rate x bus width); the dark bar what a decode step streams at, the peak
# x `memory_efficiency`: the quoted single-thread rate where one was published, the GPU class's typical fraction
# (assumed) where none was.

# %%
bw = library.melt(id_vars=["device", "efficiency_kind"], value_vars=["dram_peak_gb_s", "streaming_gb_s"],
                  var_name="rate", value_name="gb_s")
bw["rate"] = bw["rate"].map({"dram_peak_gb_s": "datasheet peak", "streaming_gb_s": "streaming (peak x efficiency)"})
order = library.sort_values("dram_peak_gb_s")["device"].tolist()
bars = alt.Chart(bw).mark_bar().encode(
    y=alt.Y("device:N", sort=order, title=None), x=alt.X("gb_s:Q", title="DRAM bandwidth (GB/s)"),
    yOffset=alt.YOffset("rate:N"), color=alt.Color("rate:N", scale=alt.Scale(range=["#c6dbef", "#08519c"]),
                                                     legend=alt.Legend(orient="bottom", title=None)),
    tooltip=["device", "rate", alt.Tooltip("gb_s:Q", format=".1f"), "efficiency_kind"])
rec.chart(bars.properties(width=460, height=alt.Step(9), title="datasheet peak vs streaming rate"), "bandwidth",
          data=bw)

# %%
quoted = library[library.efficiency_kind == "derived"]
say("Of the {n} devices, {q} quote their streaming rate; it runs at {eff} of the datasheet peak (one thread: "
    "{lo} on {lo_dev}, {hi} on {hi_dev}). The boards whose one core nearly saturates a narrow bus (the Raspberry "
    "Pi 5 and CM5) stream close to the peak; a wide bus behind few busy cores (Apple's, the Jetson's, the "
    "laptop's) shows a low single-thread fraction, a lower bound of what all cores reach.",
    n=len(library), q=len(quoted), eff=span(quoted.memory_efficiency, ".0%"),
    lo=f"{quoted.memory_efficiency.min():.0%}", lo_dev=quoted.loc[quoted.memory_efficiency.idxmin(), "device"],
    hi=f"{quoted.memory_efficiency.max():.0%}", hi_dev=quoted.loc[quoted.memory_efficiency.idxmax(), "device"])


# %% [markdown]
# ## 2. One board alone: decode tokens/s and energy per token
# Each model's decode step (one token, a 128-token context) in the chosen weight format on one device alone (the
# `local` scheme: every layer's kernels on the roofline of the device's peaks and streaming rate). Energy per token
# is the step's time x the preset's power, where a power is stated.

# %%
def decode(device: DeviceSpec, model_name: str):
    """The `local` decode step of `model_name` on `device` alone (one token, 128 tokens attended)."""
    paper, fn = REGISTRY["local"]
    cluster = Cluster((device,), Topology("switch", 1, Link.from_mbps(1000.0)))
    workload = Workload(phase="decode", seq_len=128, kv_len=128, weight_bits=WEIGHT_BITS, activation_bits=16,
                        weight_format=weight_format)
    return evaluate("local", paper, fn, get_model(model_name), cluster, workload)


def single_row(device_id: str, model_name: str) -> dict:
    """tokens/s, its memory / compute split, and J/token of one model on one device."""
    d = DEVICES[device_id]
    entry = decode(d, model_name)
    r = entry.result
    ok = entry.status == "ok"
    latency = r.latency_s if ok else math.nan
    return {"device": d.name, "id": device_id, "model": model_name, "status": entry.status,
            "latency_s": latency, "tokens_per_s": 1 / latency if ok else math.nan,
            "memory_share": r.memory_s / r.latency_s if ok else math.nan,
            "j_per_token": latency * d.power_w if ok and d.power_w > 0 else math.nan}


single = pd.DataFrame([single_row(d, m) for d in EDGE for m in MODEL_NAMES])
single.pivot(index="device", columns="model", values="tokens_per_s").add_suffix(" (tokens/s)")

# %%
tps = alt.Chart(single.dropna(subset=["tokens_per_s"])).mark_bar().encode(
    y=alt.Y("device:N", sort=order, title=None), x=alt.X("tokens_per_s:Q", title="decode tokens/s (one device)"),
    yOffset=alt.YOffset("model:N", sort=MODEL_NAMES), color=alt.Color("model:N", sort=MODEL_NAMES,
                                                                      legend=alt.Legend(orient="bottom")),
    tooltip=["device", "model", alt.Tooltip("tokens_per_s:Q", format=".2f"), alt.Tooltip("j_per_token:Q", format=".2f")])
rec.chart(tps.properties(width=460, height=alt.Step(7), title=f"one device, {weight_format} weights"),
          "decode_tokens_per_s", data=single)

# %%
first = single[single.model == MODEL_NAMES[0]].dropna(subset=["tokens_per_s"])
energy = first.dropna(subset=["j_per_token"])
say("{model} in {fmt} decodes at {tps} on one device (memory streaming is {share} of the step); energy per "
    "token, where the preset states a power, runs {j}: {jlo_dev} spends least per token.",
    model=MODEL_NAMES[0], fmt=weight_format, tps=span(first.tokens_per_s, ".2g", "tokens/s"),
    share=span(first.memory_share, ".0%"), j=span(energy.j_per_token, ".2g", "J"),
    jlo_dev=energy.loc[energy.j_per_token.idxmin(), "device"])

# %% [markdown]
# ## 3. What each assumed constant moves
# Every constant a preset marks `assumed` that the decode prediction reads is divided and multiplied by the
# `sensitivity_factor` parameter (a fraction is capped at one), and the first model's tokens/s recomputed. A
# bar spans the change from the low value (hollow end) to the high value (filled end); a constant whose bar is a
# dot on zero does not bind the step.

# %%
FIELD_OF = {spec.preset_key: f.name for f, spec in declared_fields(DeviceSpec)
            if spec.preset_key and spec.kind == "number"}
FRACTIONS = {"efficiency_gemm", "efficiency_gemv", "memory_efficiency"}


def sensitivity_rows(device_id: str, model_name: str) -> list[dict]:
    """The tokens/s change when each assumed, decode-read constant of a device is scaled down and up."""
    d = DEVICES[device_id]
    base = 1 / decode(d, model_name).result.latency_s
    rows = []
    for key, constant in d.provenance.items():
        field = FIELD_OF.get(key)
        if constant.kind != "assumed" or field is None or key == "power_w":
            continue
        now = getattr(d, field)
        high = min(now * sensitivity_factor, 1.0) if field in FRACTIONS else now * sensitivity_factor
        change = [1 / decode(d.with_changes(**{field: v}), model_name).result.latency_s / base - 1
                  for v in (now / sensitivity_factor, high)]
        rows.append({"device": d.name, "constant": key, "value": now, "low_change": change[0],
                     "high_change": change[1]})
    return rows


sensitivity = pd.DataFrame([r for d in EDGE for r in sensitivity_rows(d, MODEL_NAMES[0])])
sensitivity.round(3)

# %%
rec.chart(sensitivity_chart(sensitivity, order, f"{MODEL_NAMES[0]} tokens/s change",
                            f"assumed constants divided / multiplied by {sensitivity_factor:g}"),
          "sensitivity", data=sensitivity)

# %%
swing = sensitivity.assign(span=sensitivity.high_change - sensitivity.low_change)
top = swing.loc[swing.span.idxmax()]
compute = swing[swing.constant.str.startswith("efficiency_")]
worst = compute.loc[compute.span.idxmax()]
say("The assumed constant that moves the prediction most is {c} on {dev}: from {lo} to {hi} tokens/s. Of the "
    "compute efficiencies, {wc} moves {wdev} most ({wlo} when divided), where the step's arithmetic is nearly as "
    "long as its streaming; on {still} of the {n} devices no compute efficiency moves the step at all.",
    c=top.constant, dev=top.device, lo=f"{top.low_change:+.0%}", hi=f"{top.high_change:+.0%}", wc=worst.constant,
    wdev=worst.device, wlo=f"{worst.low_change:+.0%}",
    still=sum(g.span.abs().max() < 1e-9 for _, g in compute.groupby("device")), n=compute.device.nunique())


# %% [markdown]
# ## 4. A cluster of each board: where adding boards stops helping
# The `scheme` parameter's decode step of the first model on 1 to `max_devices` identical boards on a switch of
# the board's own link class (the preset's `link_class`: the fastest library class its NIC runs). A count the
# scheme cannot split the model over is left out. The count with the least latency is where adding boards stops
# helping; the arena notebook and `whatif --devices` explain why it stops. The link classes first: a TCP
# stream's bandwidth, the wire latency per hop and each endpoint's time per message, split from published round
# trips (`quoted` / `derived`) or `assumed` where no measurement was found.

# %%
def link_table() -> pd.DataFrame:
    """The library's link classes: bandwidth, per-hop latency and per-message endpoint time, each with its kind."""
    cited = load_constants(LINK_CLASSES_PATH)
    return pd.DataFrame([{"link_class": name,
                          **{column: cited[f"{name}_{part}"].value for part, column in LINK_PARTS.items()},
                          **{f"{part}_kind": cited[f"{name}_{part}"].kind for part in LINK_PARTS}}
                         for name in LINK_CLASSES])


# each part's constant (`<class>_<part>` in links.toml, in SI) -> its column, named for its unit
LINK_PARTS = {"bandwidth": "bandwidth_bytes_per_s", "latency": "latency_s", "message_overhead": "message_overhead_s"}
link_table()


# %%
def cluster_row(device_id: str, n: int, model_name: str) -> dict:
    """The scheme's decode step on `n` copies of a library device on its link class."""
    d = DEVICES[device_id]
    link = link_class(preset_table(device_id)["meta"]["link_class"])
    cluster = Cluster((d,) * n, Topology("switch", n, link))
    workload = Workload(phase="decode", seq_len=128, kv_len=128, weight_bits=WEIGHT_BITS, activation_bits=16,
                        weight_format=weight_format)
    paper, fn = REGISTRY[scheme]
    entry = evaluate(scheme, paper, fn, get_model(model_name), cluster, workload)
    ok = entry.status == "ok"
    r = entry.result
    return {"device": d.name, "id": device_id, "link_class": link.name, "devices": n, "status": entry.status,
            "latency_s": r.latency_s if ok else math.nan,
            "comm_s": (r.comm_link_latency_s + r.comm_bytes_s) if ok else math.nan, "note": entry.error}


scaling = pd.DataFrame([cluster_row(d, n, MODEL_NAMES[0]) for d in EDGE for n in COUNTS])
feasible = scaling.dropna(subset=["latency_s"])
best = feasible.loc[feasible.groupby("device")["latency_s"].idxmin()].set_index("device")
stops = best.assign(one_device_s=feasible[feasible.devices == 1].set_index("device")["latency_s"])
stops = stops.assign(speedup=stops.one_device_s / stops.latency_s)[["link_class", "devices", "latency_s",
                                                                     "one_device_s", "speedup"]]
stops.rename(columns={"devices": "min_latency_devices"})

# %%
lines = alt.Chart(feasible).mark_line(point=True).encode(
    x=alt.X("devices:Q", scale=alt.Scale(type="log", base=2),
            axis=alt.Axis(values=sorted(set(feasible.devices)), format="d"), title="boards"),
    y=alt.Y("latency_s:Q", scale=alt.Scale(type="log"), title="decode step (s)"),
    color=alt.Color("device:N", scale=alt.Scale(scheme="category20"), legend=alt.Legend(orient="right", labelLimit=260)),
    tooltip=["device", "devices", "link_class", alt.Tooltip("latency_s:Q", format=".4f")])
marks = alt.Chart(stops.reset_index()).mark_point(shape="diamond", size=120, filled=True, color="black").encode(
    x="devices:Q", y="latency_s:Q", tooltip=["device", "devices", "speedup"])
rec.chart(alt.layer(lines, marks).properties(width=420, height=320,
                                             title=f"{scheme}, {MODEL_NAMES[0]} {weight_format} (diamond: least latency)"),
          "cluster_scaling", data=feasible)

# %%
largest = int(feasible.devices.max())
say("On its own link class, {scheme} reaches its least decode latency at {counts} boards; the fastest cluster "
    "runs {speedup} times as fast as one board. {k} of the {n} boards are fastest at the largest count the scheme splits "
    "{model} over ({largest}): their latency has not stopped falling there, the split ends it. Counts it cannot "
    "split over: {bad}.",
    scheme=scheme, counts=span(stops.devices, ".0f"), speedup=span(stops.speedup, ".2g"), model=MODEL_NAMES[0],
    k=int((stops.devices == largest).sum()), n=len(stops), largest=largest,
    bad=", ".join(str(n) for n in sorted(set(scaling[scaling.status != "ok"].devices))) or "none")

# %%
rows = [
    result_rows("devices", "library", library, {"dram_peak_gb_s": "GB/s", "achieved_gb_s": "GB/s",
                                                "memory_efficiency": "1", "peak_fp32_gops": "GFLOP/s",
                                                "power_w": "W"}, model="", setting=library["id"], dropna=True),
    result_rows("devices", "single_device_decode", single, {"tokens_per_s": "1/s", "j_per_token": "J"},
                model=single["model"], setting=single["id"] + f",{weight_format}", dropna=True),
    result_rows("devices", "sensitivity", sensitivity, {"low_change": "1", "high_change": "1"}, model=MODEL_NAMES[0],
                setting=sensitivity["device"] + "," + sensitivity["constant"], dropna=True),
    result_rows("devices", "cluster_scaling", feasible, {"latency_s": "s"}, model=MODEL_NAMES[0],
                setting=feasible["id"] + "," + feasible["link_class"] + ",n=" + feasible["devices"].astype(str)
                + f",{scheme}", dropna=True),
    result_rows("devices", "min_latency_devices", stops.reset_index().merge(library[["device", "id"]]),
                {"devices": "devices", "speedup": "1"}, model=MODEL_NAMES[0],
                setting=stops.reset_index().merge(library[["device", "id"]])["id"] + f",{scheme}")]
for part in rows:
    rec.add(part)
_ = rec.write()  # figures/devices/results.csv (no path in the page: a batch run writes to a staging folder)
print(f"{len(rec.table())} result rows recorded")
