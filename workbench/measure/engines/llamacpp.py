"""llama.cpp run here through llama-cpp-python (the `engines` extra): quantize a GGUF file with llama.cpp itself and
time prefill and decode the way llama-bench does.

Timing mirrors llama-bench (`tools/llama-bench/llama-bench.cpp` of the llama.cpp that llama-cpp-python 0.3.36
vendors: `test_prompt` decodes the prompt in `n_batch` chunks with `llama_batch_get_one`, `test_gen` decodes one
token per `llama_decode`, each followed by `llama_synchronize`; the KV cache is cleared between repetitions with
`llama_memory_clear`). A prefill row is the time of the whole prompt; a decode row is the median time of one
token over `decode_tokens` tokens generated after a prompt of `prompt_tokens` (so they attend about
prompt_tokens + decode_tokens / 2 positions). Wall times are measured on a shared machine: they vary run to run.
"""

from __future__ import annotations

import ctypes
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from workbench.core.errors import WorkbenchError

# block format (workbench.model.formats names) or recipe -> (llama_ftype constant name, pure): `pure` quantizes every
# tensor, the output and embeddings too, to that one format (llama_model_quantize_params.pure), so a row times one
# kernel; a recipe (upper case) keeps llama.cpp's own per-tensor rules.
FTYPES = {
    "f16": ("LLAMA_FTYPE_MOSTLY_F16", True), "bf16": ("LLAMA_FTYPE_MOSTLY_BF16", True),
    "q8_0": ("LLAMA_FTYPE_MOSTLY_Q8_0", True), "q4_0": ("LLAMA_FTYPE_MOSTLY_Q4_0", True),
    "q4_1": ("LLAMA_FTYPE_MOSTLY_Q4_1", True), "q5_0": ("LLAMA_FTYPE_MOSTLY_Q5_0", True),
    "q5_1": ("LLAMA_FTYPE_MOSTLY_Q5_1", True), "q2_k": ("LLAMA_FTYPE_MOSTLY_Q2_K", True),
    "q3_k": ("LLAMA_FTYPE_MOSTLY_Q3_K_M", True), "q4_k": ("LLAMA_FTYPE_MOSTLY_Q4_K_M", True),
    "q5_k": ("LLAMA_FTYPE_MOSTLY_Q5_K_M", True), "q6_k": ("LLAMA_FTYPE_MOSTLY_Q6_K", True),
    "iq4_nl": ("LLAMA_FTYPE_MOSTLY_IQ4_NL", True), "iq4_xs": ("LLAMA_FTYPE_MOSTLY_IQ4_XS", True),
    "Q4_K_M": ("LLAMA_FTYPE_MOSTLY_Q4_K_M", False),
}


@dataclass(frozen=True)
class Timing:
    """One measured configuration: prefill seconds of the whole prompt and decode seconds per token (medians)."""

    prefill_s: float
    decode_s: float
    prompt_tokens: int
    decode_tokens: int
    threads: int
    repeats: int

    def __post_init__(self) -> None:
        if not (self.prefill_s > 0 and self.decode_s > 0):
            raise WorkbenchError(f"timings must be > 0 s, got prefill {self.prefill_s!r}, decode {self.decode_s!r}")


_SILENT = []  # the C callback that drops llama.cpp's log lines, kept alive for the process


def llama_cpp_module():
    """The llama_cpp module with its log lines silenced, or one line saying how to install it."""
    try:
        import llama_cpp
    except ImportError:
        raise WorkbenchError("llama.cpp is not installed: pip install '.[engines]' "
                             "(CMAKE_ARGS=\"-DGGML_RPC=ON\"; about 6 minutes on 2 cores)") from None
    if not _SILENT:
        _SILENT.append(llama_cpp.llama_log_callback(lambda level, text, user_data: None))
        llama_cpp.llama_log_set(_SILENT[0], ctypes.c_void_p())
    return llama_cpp


def quantize(source: str | Path, target: str | Path, fmt: str, threads: int = 2) -> Path:
    """Quantize the GGUF file `source` to `fmt` (a key of `FTYPES`) with llama.cpp itself into `target`."""
    if fmt not in FTYPES:
        raise WorkbenchError(f"format must be one of {', '.join(FTYPES)}, got {fmt!r}")
    lib = llama_cpp_module()
    name, pure = FTYPES[fmt]
    params = lib.llama_model_quantize_default_params()
    params.ftype, params.nthread, params.pure = getattr(lib, name), threads, pure
    tmp = Path(str(target) + ".tmp")
    rc = lib.llama_model_quantize(str(source).encode(), str(tmp).encode(), ctypes.byref(params))
    if rc != 0:
        tmp.unlink(missing_ok=True)
        raise WorkbenchError(f"llama.cpp could not quantize {source} to {fmt} (llama_model_quantize returned {rc})")
    tmp.replace(target)
    return Path(target)


def _decode(lib, ctx, tokens: list[int]) -> None:
    """One llama_decode of `tokens` as a single batch, waited for (llama-bench's test_prompt / test_gen step)."""
    arr = (lib.llama_token * len(tokens))(*tokens)
    if lib.llama_decode(ctx, lib.llama_batch_get_one(arr, len(tokens))) != 0:
        raise WorkbenchError("llama_decode failed")
    lib.llama_synchronize(ctx)


def _one_repeat(lib, ctx, prompt: list[int], decode_tokens: int) -> tuple[float, list[float]]:
    """(prefill seconds, per-token decode seconds) of one repetition from an empty cache."""
    lib.llama_memory_clear(lib.llama_get_memory(ctx), True)
    start = time.perf_counter()
    _decode(lib, ctx, prompt)
    prefill = time.perf_counter() - start
    steps = []
    for i in range(decode_tokens):
        start = time.perf_counter()
        _decode(lib, ctx, [3 + i % 100])
        steps.append(time.perf_counter() - start)
    return prefill, steps


def time_model(path: str | Path, threads: int, prompt_tokens: int = 64, decode_tokens: int = 16,
               repeats: int = 3) -> Timing:
    """Median prefill and decode times of the GGUF file at `path` on `threads` threads (llama-bench's method)."""
    lib = llama_cpp_module()
    lib.llama_backend_init()
    mparams = lib.llama_model_default_params()
    model = lib.llama_model_load_from_file(str(path).encode(), mparams)
    if not model:
        raise WorkbenchError(f"llama.cpp could not load {path}")
    cparams = lib.llama_context_default_params()
    cparams.n_ctx = prompt_tokens + decode_tokens + 16
    cparams.n_batch = cparams.n_ubatch = max(prompt_tokens, 1)
    cparams.n_threads = cparams.n_threads_batch = threads
    ctx = lib.llama_init_from_model(model, cparams)
    try:
        prompt = [3 + i % 100 for i in range(prompt_tokens)]
        _one_repeat(lib, ctx, prompt, 2)  # warm-up: pages the weights in, builds the graphs
        prefills, steps = [], []
        for _ in range(repeats):
            prefill, decode = _one_repeat(lib, ctx, prompt, decode_tokens)
            prefills.append(prefill)
            steps.extend(decode)
    finally:
        lib.llama_free(ctx)
        lib.llama_model_free(model)
    return Timing(statistics.median(prefills), statistics.median(steps), prompt_tokens, decode_tokens, threads, repeats)
