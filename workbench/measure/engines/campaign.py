"""The llama.cpp campaign on this machine: random-weight Llama-shaped models from cache-resident to past the LLC (and
one Qwen3-MoE shape), quantized by llama.cpp to every format it makes that `workbench.model.formats` names, decode and
prefill timed at 1 and 2 threads (`workbench.measure.engines.llamacpp.time_model`), stored as measured rows with the host,
engine version, build and the machine's load (`python -m workbench engines campaign`; data/engines/).

`predict` costs the same rows with the workbench: `single_device_resident` on one device that runs llama.cpp's
kernels (`Workload.engine`), the device either a datasheet-style description of the host or its engine profile.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import tempfile
from dataclasses import replace
from pathlib import Path

import pandas as pd

from workbench.core.errors import WorkbenchError
from workbench.core.io import DATA_DIR
from workbench.measure.engines.gguf_model import write_gguf
from workbench.measure.engines.llamacpp import FTYPES, quantize, time_model
from workbench.model.models import TransformerConfig
from workbench.schemes.baselines import SINGLE_DEVICE

CAMPAIGN_CSV = DATA_DIR / "engines" / "llamacpp_campaign.csv"
ENGINE_VERSION = "llama-cpp-python 0.3.36"
BUILD = 'CMAKE_ARGS="-DGGML_RPC=ON -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"'
PROMPT_TOKENS, DECODE_TOKENS, REPEATS = 64, 16, 3
# the features the engines extra's build compiles kernels for (its CMAKE_ARGS): a datasheet description of this host
# runs llama.cpp's AVX2 branches whatever else its cores have (`as_built`)
BUILD_ISA = ("sse3", "ssse3", "avx", "f16c", "fma", "avx2")
THREADS = (1, 2)


def _llama(name: str, layers: int, d: int, heads: int, kv: int, ff: int, vocab: int = 8192) -> TransformerConfig:
    """A Llama-shaped campaign model (untied output, as llama.cpp's Llama files)."""
    return TransformerConfig(name, "llama", n_layers=layers, d_model=d, n_heads=heads, d_ff=ff, vocab_size=vocab,
                             n_kv_heads=kv, max_positions=2048, tie_embeddings=False)


# sizes from cache-resident (L2 2 MiB/core, LLC 300 MiB shared on this host) to well past the LLC in f16
SHAPES = {
    "s-1024x4": _llama("s-1024x4", 4, 1024, 16, 8, 2816),
    "m-2048x6": _llama("m-2048x6", 6, 2048, 16, 8, 5632),
    "l-3072x4": _llama("l-3072x4", 4, 3072, 24, 8, 8192),
}
MOE_SHAPE = TransformerConfig("moe-1024x4-e16a4", "llama", n_layers=4, d_model=1024, n_heads=16, d_ff=768,
                              vocab_size=8192, n_kv_heads=4, d_head=64, max_positions=2048, n_experts=16,
                              n_active_experts=4, tie_embeddings=False)
MOE_FORMATS = ("q8_0", "q4_0", "q4_k", "Q4_K_M")


def campaign_formats() -> tuple[str, ...]:
    """Every format llama.cpp makes here that the workbench names (`FTYPES`), recipes included."""
    return tuple(FTYPES)


def cpu_label() -> str:
    """The CPU the rows ran on, from /proc/cpuinfo (model name, family, model) and the CPUs this process may use."""
    fields = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        return platform.processor() or "unknown CPU"
    return (f"{fields.get('model name', 'unknown CPU')}, family {fields.get('cpu family', '?')} model "
            f"{fields.get('model', '?')}, {len(os.sched_getaffinity(0))} CPUs (/proc/cpuinfo)")


def _row(shape: TransformerConfig, fmt: str, threads: int, phase: str, seconds: float, file_bytes: int) -> dict:
    """One measured row: what ran, on what, when, and the machine's load while it ran (contention)."""
    return {"engine": "llama.cpp", "engine_version": ENGINE_VERSION, "build": BUILD, "host": platform.node(),
            "cpu": cpu_label(),
            "date": dt.date.today().isoformat(), "shape": shape.name, "n_layers": shape.n_layers,
            "d_model": shape.d_model, "n_heads": shape.n_heads, "n_kv_heads": shape.n_kv_heads,
            "d_head": shape.d_head, "d_ff": shape.d_ff, "vocab_size": shape.vocab_size,
            "n_experts": shape.n_experts, "n_active_experts": shape.n_active_experts, "format": fmt,
            "file_bytes": file_bytes, "threads": threads, "phase": phase,
            "prompt_tokens": PROMPT_TOKENS, "decode_tokens": DECODE_TOKENS, "repeats": REPEATS,
            "seconds": seconds, "load_1min": round(os.getloadavg()[0], 2),
            "method": "llama-bench's method through llama-cpp-python (workbench.measure.engines.llamacpp.time_model): "
                      "prefill = median time of the whole prompt; decode = median time of one token"}


def run_shape(shape: TransformerConfig, formats: tuple[str, ...], work: Path, threads=THREADS) -> list[dict]:
    """Write `shape` in f16, quantize it to each format, time decode and prefill at each thread count."""
    source = write_gguf(shape, work / f"{shape.name}-f16.gguf")
    rows = []
    for fmt in formats:
        path = source if fmt == "f16" else quantize(source, work / f"{shape.name}-{fmt}.gguf", fmt)
        for t in threads:
            timing = time_model(path, t, PROMPT_TOKENS, DECODE_TOKENS, REPEATS)
            rows.append(_row(shape, fmt, t, "prefill", timing.prefill_s, path.stat().st_size))
            rows.append(_row(shape, fmt, t, "decode", timing.decode_s, path.stat().st_size))
        if path != source:
            path.unlink()
    source.unlink()
    return rows


def run_campaign(out: Path = CAMPAIGN_CSV, shapes=None, formats=None, moe: bool = True) -> pd.DataFrame:
    """The whole campaign (minutes on 2 cores), written atomically to `out`."""
    shapes = tuple(SHAPES) if shapes is None else tuple(shapes)
    for name in shapes:
        if name not in SHAPES:
            raise WorkbenchError(f"shape must be one of {', '.join(SHAPES)}, got {name!r}")
    formats = campaign_formats() if formats is None else tuple(formats)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in shapes:
            rows += run_shape(SHAPES[name], formats, Path(tmp))
        if moe:
            rows += run_shape(MOE_SHAPE, tuple(f for f in MOE_FORMATS if f in formats or formats == ()), Path(tmp))
    frame = pd.DataFrame(rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = out.with_suffix(".csv.tmp")
    frame.to_csv(tmp_out, index=False)
    tmp_out.replace(out)
    return frame


def row_model(row) -> TransformerConfig:
    """The TransformerConfig of a stored campaign row."""
    return TransformerConfig(row["shape"], "llama", n_layers=int(row["n_layers"]), d_model=int(row["d_model"]),
                             n_heads=int(row["n_heads"]), d_ff=int(row["d_ff"]), vocab_size=int(row["vocab_size"]),
                             n_kv_heads=int(row["n_kv_heads"]), d_head=int(row["d_head"]), max_positions=2048,
                             n_experts=int(row["n_experts"]), n_active_experts=int(row["n_active_experts"]),
                             tie_embeddings=False)


def with_threads(device, threads: int):
    """`device` as llama.cpp runs on `threads` of its cores: those cores compute, and they stream at most at
    `threads` x one core's rate where the device states it (`DeviceSpec.core_stream_bytes_per_s`)."""
    out = replace(device, cores=threads)
    if device.core_stream_bytes_per_s > 0 and device.memory:
        dram = device.memory[-1]
        cap = threads * device.core_stream_bytes_per_s / device.memory_efficiency
        out = out.with_memory(dram.name, bandwidth_bytes_per_s=min(dram.bandwidth_bytes_per_s, cap))
    return out


def as_built(device):
    """`device` as the engines extra's build runs on it: only the ISA features the build compiles for (`BUILD_ISA`)."""
    return replace(device, isa=tuple(f for f in device.isa if f in BUILD_ISA))


def predict(row, device, engine: bool = True) -> float:
    """Seconds the workbench gives a campaign row: single_device_resident running llama.cpp's kernels on `device`
    (as it runs on the row's threads: the device itself when its cores are those threads, an engine profile, else
    `with_threads`); a decode row attends the prompt plus half the generated tokens. `engine` False: the format's
    bits at the device's dense rates (the workbench before engine kernels)."""
    from workbench.machine.network import Link, Topology
    from workbench.model.formats import weight_format_bits
    from workbench.schemes.base import Cluster, Workload, load_all

    model, fmt, threads = row_model(row), row["format"], int(row["threads"])
    decode_kv = int(row["prompt_tokens"]) + int(row["decode_tokens"]) // 2
    workload = Workload(row["phase"], seq_len=int(row["prompt_tokens"]), kv_len=decode_kv,
                        weight_bits=weight_format_bits(fmt, model), activation_bits=32.0, kv_bits=16.0,
                        engine="llama.cpp" if engine else "", weight_format=fmt)
    runs_on = device if device.cores == threads else with_threads(device, threads)
    cluster = Cluster((runs_on,), Topology("direct", 1, Link(1e9, 0.0)))
    return float(load_all()[SINGLE_DEVICE][1](model, cluster, workload).latency_s)
