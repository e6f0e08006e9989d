"""`python -m workbench profile --engine llama.cpp`: the engine's own kernel rates and fixed costs on the machine it
runs on, written into a device TOML as measured constants (`kernel_rate_llamacpp_<format>_<gemv|gemm>`,
`layer_overhead`, `step_overhead`, the streaming rate at the thread count).

Three measurements, none of them a row the campaign is judged on (`workbench.measure.engines.campaign` uses other shapes):

* **Streaming**: `threads` processes each summing its own 256 MiB float32 array at once (numpy, one pass, best of
  `repeats`): the read rate the engine's threads share (a single-thread run is one core's rate).
* **Fixed costs**: decode of a tiny model (d_model 64) with 1 and 9 layers: the per-layer slope is llama.cpp's
  graph time per layer (its node scheduling and thread barriers), the intercept its time per step outside the
  layers (graph build, the input and the logits).
* **Kernel rates**: decode and a 64-token prefill of a cache-resident model (`PROFILE_SHAPE`, about 52 M weights)
  quantized by llama.cpp to each format: multiply-accumulates of its matmuls over the time left after the fixed
  costs. Its weights stay in cache, so the rate is the kernel's arithmetic, not the memory's.

Measured wall times on a shared machine vary run to run (medians and best-of are kept; say so where used).
"""

from __future__ import annotations

import datetime as dt
import multiprocessing
import platform
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from workbench.core.errors import WorkbenchError, require_int
from workbench.measure.engines.gguf_model import write_gguf
from workbench.measure.engines.llamacpp import FTYPES, quantize, time_model
from workbench.model.models import TransformerConfig

# The shape the kernel rates are timed on (not a campaign shape): 2 layers of d_model 1536, about 52 M weights (29 MB
# at q4_0, 104 MB at f16: inside this host's 300 MiB LLC, so its timing is the kernels' arithmetic). Its rows are 6
# of k-quants' 256-weight super-blocks long: a d_model 768 shape (3 per row) timed q4_k's prefill 25 % below what
# longer rows reach, a shape effect of the profile, not of the kernel.
PROFILE_SHAPE = TransformerConfig("profile-1536x2", "llama", n_layers=2, d_model=1536, n_heads=12, d_ff=4096,
                                  vocab_size=2048, n_kv_heads=4, max_positions=512, tie_embeddings=False)
FIXED_LAYERS = (1, 9)
PROMPT_TOKENS = 64
STREAM_BYTES = 256 * 2**20


def tiny_model(layers: int) -> TransformerConfig:
    """The fixed-cost probe: d_model 64 with `layers` layers, so kernel time is negligible beside graph time."""
    return TransformerConfig(f"tiny-64x{layers}", "llama", n_layers=layers, d_model=64, n_heads=2, d_ff=128,
                             vocab_size=256, n_kv_heads=2, max_positions=512, tie_embeddings=False)


def matmul_macs(model: TransformerConfig, tokens: int) -> float:
    """Multiply-accumulates of a step's weight matmuls for `tokens` tokens: every layer's, and the output head's for
    the last token only (llama.cpp computes the logits of the batch's last token: `llama_batch_get_one`)."""
    per_layer = model.d_model * (model.q_dim + 2 * model.kv_dim) + model.q_dim * model.d_model \
        + 3 * model.d_model * model.d_ff
    return float(tokens * model.n_layers * per_layer + model.vocab_size * model.d_model)


def _sum_pass(n_bytes: int, repeats: int) -> float:
    """Best seconds of one numpy pass summing a fresh float32 array of `n_bytes` (in a worker process)."""
    a = np.ones(n_bytes // 4, dtype=np.float32)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a.sum()
        best = min(best, time.perf_counter() - start)
    return best


def stream_rate(threads: int, repeats: int = 5) -> float:
    """Bytes/s `threads` processes read together, each summing its own array (the slowest sets the rate)."""
    with multiprocessing.get_context("spawn").Pool(threads) as pool:
        seconds = pool.starmap(_sum_pass, [(STREAM_BYTES, repeats)] * threads)
    return threads * STREAM_BYTES / max(seconds)


@dataclass(frozen=True)
class EngineProfile:
    """What `profile --engine llama.cpp` measured: the threads, stream rate, fixed costs and MAC/s per kernel."""

    threads: int
    stream_bytes_per_s: float
    layer_overhead_s: float
    step_overhead_s: float
    kernel_rates: dict[str, float]
    host: str
    date: str

    def __post_init__(self) -> None:
        require_int("threads", self.threads, low=1)
        if not (self.stream_bytes_per_s > 0 and self.layer_overhead_s >= 0 and self.step_overhead_s >= 0):
            raise WorkbenchError(f"engine profile: stream rate > 0 and fixed costs >= 0 needed, got "
                                 f"{self.stream_bytes_per_s}, {self.layer_overhead_s}, {self.step_overhead_s}")


def fixed_costs(work: Path, threads: int) -> tuple[float, float]:
    """(per-layer, per-step) seconds of llama.cpp's decode graph from the tiny models' decode times."""
    times = []
    for layers in FIXED_LAYERS:
        path = write_gguf(tiny_model(layers), work / f"tiny{layers}.gguf")
        times.append(time_model(path, threads, prompt_tokens=8, decode_tokens=32, repeats=3).decode_s)
    slope = (times[1] - times[0]) / (FIXED_LAYERS[1] - FIXED_LAYERS[0])
    return max(slope, 0.0), max(times[0] - slope * FIXED_LAYERS[0], 0.0)


def kernel_rates(work: Path, threads: int, formats: tuple[str, ...], layer_s: float, step_s: float) -> dict[str, float]:
    """MAC/s of each format's decode (gemv) and prefill (gemm) kernels on the cache-resident profile shape."""
    source = write_gguf(PROFILE_SHAPE, work / "profile-f16.gguf")
    fixed = step_s + PROFILE_SHAPE.n_layers * layer_s
    rates = {}
    for fmt in formats:
        path = source if fmt == "f16" else quantize(source, work / f"profile-{fmt}.gguf", fmt, threads)
        timing = time_model(path, threads, PROMPT_TOKENS, decode_tokens=16, repeats=3)
        rates[f"llamacpp_{fmt}_gemv"] = matmul_macs(PROFILE_SHAPE, 1) / max(timing.decode_s - fixed, 1e-9)
        rates[f"llamacpp_{fmt}_gemm"] = matmul_macs(PROFILE_SHAPE, PROMPT_TOKENS) / max(timing.prefill_s - fixed, 1e-9)
    return rates


def measure(threads: int, formats: tuple[str, ...] | None = None) -> EngineProfile:
    """Stream rate, fixed costs and kernel rates of llama.cpp at `threads` threads on this machine."""
    formats = tuple(f for f in FTYPES if f.islower()) if formats is None else formats
    for fmt in formats:
        if fmt not in FTYPES or not fmt.islower():
            raise WorkbenchError(f"format must be one of {', '.join(f for f in FTYPES if f.islower())}, got {fmt!r}")
    with tempfile.TemporaryDirectory() as tmp:
        layer_s, step_s = fixed_costs(Path(tmp), threads)
        rates = kernel_rates(Path(tmp), threads, formats, layer_s, step_s)
    return EngineProfile(threads, stream_rate(threads), layer_s, step_s, rates, platform.node() or "this machine",
                         dt.date.today().isoformat())


def _constant(name: str, value: float, unit: str, source: str) -> str:
    """One measured constant as a device-TOML table."""
    return f'[{name}]\nvalue = {value!r}\nunit = "{unit}"\nkind = "measured"\nsource = "{source}"\n'


def device_toml(profile: EngineProfile, base: str, name: str) -> str:
    """A device TOML `based_on` preset `base`: llama.cpp's measured rates, fixed costs and streaming at the threads."""
    how = f"python -m workbench profile --engine llama.cpp --threads {profile.threads} on {profile.host}, {profile.date}"
    parts = [f"# llama.cpp as it runs on this machine at {profile.threads} thread(s): {how}. A shared machine: wall\n"
             "# times vary run to run; medians of repeats are kept.\n",
             f'[meta]\nname = "{name}"\nbased_on = "{base}"\n',
             _constant("cores", profile.threads, "count", f"{how}: the engine's threads (n_threads)"),
             _constant("mem_DRAM_bandwidth", profile.stream_bytes_per_s, "B/s",
                       f"{how}: {profile.threads} process(es) each summing its own 256 MiB float32 array at once "
                       "(numpy, best of 5)"),
             _constant("memory_efficiency", 1.0, "1", f"{how}: mem_DRAM_bandwidth is itself the achieved rate"),
             _constant("kernel_launch", 0.0, "s", f"{how}: llama.cpp's graph time is per layer (layer_overhead)"),
             _constant("layer_overhead", profile.layer_overhead_s, "s",
                       f"{how}: per-layer slope of decode time, tiny models (d_model 64) of 1 and 9 layers"),
             _constant("step_overhead", profile.step_overhead_s, "s", f"{how}: intercept of the same line")]
    parts += [_constant(f"kernel_rate_{key}", rate, "MAC/s",
                        f"{how}: {'decode' if key.endswith('gemv') else f'{PROMPT_TOKENS}-token prefill'} of a "
                        f"cache-resident {PROFILE_SHAPE.name} model in this format, MACs over the time less fixed costs")
              for key, rate in sorted(profile.kernel_rates.items())]
    return "\n".join(parts)
