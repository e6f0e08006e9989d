"""The two processes of a llama.cpp RPC run, each started in its own network namespace by `workbench.measure.engines.rpc`:

* ``serve HOST:PORT THREADS``: an RPC server the way llama.cpp's `rpc-server` starts one (tools/rpc/rpc-server.cpp
  :195-257 at 0c1e57098: the CPU device, `ggml_backend_rpc_start_server(endpoint, cache_dir, n_threads, n_devices,
  devices)`, ggml/include/ggml-rpc.h:27), through ctypes on the libraries llama-cpp-python ships; it never returns.
* ``ping HOST:PORT COUNT GAP_S``: round trips of ggml-rpc's smallest waited command (`ping`), for its endpoint time.
* ``client CONFIG_JSON``: loads the model over the servers (`ggml_backend_rpc_add_server`, ggml-rpc.cpp, and
  llama_model_params.devices / tensor_split / n_gpu_layers, src/llama-model.cpp:1557-1614), times prefill and
  decode as llama-bench does, reads every namespace's /proc/net/dev around each phase, prints one JSON line.

Children start with SIGINT at its default: the parent, not Python's KeyboardInterrupt, tears them down.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

GGML_BACKEND_DEVICE_TYPE_CPU = 0  # enum ggml_backend_dev_type (ggml/include/ggml-backend.h)


def _libs():
    """(llama_cpp module, libggml, libggml-base, libggml-rpc) from llama-cpp-python's lib folder."""
    from workbench.measure.engines.llamacpp import llama_cpp_module

    lib = llama_cpp_module()
    folder = Path(lib.__file__).parent / "lib"
    ggml = ctypes.CDLL(str(folder / "libggml.so"))
    base = ctypes.CDLL(str(folder / "libggml-base.so"))
    rpc = ctypes.CDLL(str(folder / "libggml-rpc.so"))
    ggml.ggml_backend_dev_by_type.restype = ctypes.c_void_p
    ggml.ggml_backend_dev_by_type.argtypes = [ctypes.c_int]
    rpc.ggml_backend_rpc_start_server.restype = None
    rpc.ggml_backend_rpc_start_server.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t,
                                                  ctypes.POINTER(ctypes.c_void_p)]
    rpc.ggml_backend_rpc_add_server.restype = ctypes.c_void_p
    rpc.ggml_backend_rpc_add_server.argtypes = [ctypes.c_char_p]
    base.ggml_backend_reg_dev_count.restype = ctypes.c_size_t
    base.ggml_backend_reg_dev_count.argtypes = [ctypes.c_void_p]
    base.ggml_backend_reg_dev_get.restype = ctypes.c_void_p
    base.ggml_backend_reg_dev_get.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return lib, ggml, base, rpc


def serve(endpoint: str, threads: int) -> None:
    """Run an RPC server on `endpoint` with the CPU device and `threads` threads (blocks for ever)."""
    lib, ggml, _, rpc = _libs()
    lib.llama_backend_init()
    if os.environ.get("GGML_RPC_DEBUG"):  # ggml-rpc.cpp:26: the server logs every command; default log callback
        lib.llama_log_set(ctypes.cast(None, lib.llama_log_callback), ctypes.c_void_p())
    cpu = ggml.ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU)
    devices = (ctypes.c_void_p * 1)(cpu)
    print(f"serving {endpoint}", flush=True)
    rpc.ggml_backend_rpc_start_server(endpoint.encode(), None, threads, 1, devices)


def net_dev(namespace: str) -> dict[str, tuple[int, int, int, int]]:
    """{interface: (rx bytes, rx packets, tx bytes, tx packets)} from /proc/net/dev inside `namespace`."""
    text = subprocess.run(["ip", "netns", "exec", namespace, "cat", "/proc/net/dev"], capture_output=True, text=True,
                          timeout=30, check=True).stdout
    return parse_net_dev(text)


def parse_net_dev(text: str) -> dict[str, tuple[int, int, int, int]]:
    """{interface: (rx bytes, rx packets, tx bytes, tx packets)} from the text of /proc/net/dev (fields 1, 2, 9
    and 10 after the colon; linux net/core/net-procfs.c dev_seq_printf_stats)."""
    out = {}
    for line in text.splitlines()[2:]:
        name, sep, rest = line.partition(":")
        if not sep:
            continue
        cells = rest.split()
        out[name.strip()] = (int(cells[0]), int(cells[1]), int(cells[8]), int(cells[9]))
    return out


def _counters(namespaces: list[str], interfaces: list[str]) -> list[tuple[int, int, int, int]]:
    """(rx bytes, rx packets, tx bytes, tx packets) of each process's veth, in process order."""
    return [net_dev(ns)[iface] for ns, iface in zip(namespaces, interfaces, strict=True)]


def _decode(lib, ctx, tokens: list[int]) -> None:
    """One llama_decode of `tokens` as a single batch, waited for."""
    arr = (lib.llama_token * len(tokens))(*tokens)
    if lib.llama_decode(ctx, lib.llama_batch_get_one(arr, len(tokens))) != 0:
        raise RuntimeError("llama_decode failed")
    lib.llama_synchronize(ctx)


def client(config: dict) -> dict:
    """Load the model across the servers, time prefill and decode, count the link bytes of each phase."""
    lib, _, base, rpc = _libs()
    lib.llama_backend_init()
    if os.environ.get("GGML_SCHED_DEBUG"):  # ggml-backend.cpp: the scheduler logs every split's nodes
        lib.llama_log_set(ctypes.cast(None, lib.llama_log_callback), ctypes.c_void_p())
    devices = []
    for endpoint in config["servers"]:
        reg = rpc.ggml_backend_rpc_add_server(endpoint.encode())
        if not reg:
            raise RuntimeError(f"no RPC server at {endpoint}")
        devices += [base.ggml_backend_reg_dev_get(reg, i) for i in range(base.ggml_backend_reg_dev_count(reg))]
    dev_array = (ctypes.c_void_p * (len(devices) + 1))(*devices, None)
    split = (ctypes.c_float * lib.LLAMA_MAX_DEVICES)(*config["rpc_split"])
    mparams = lib.llama_model_default_params()
    mparams.devices = ctypes.cast(dev_array, ctypes.c_void_p)
    mparams.tensor_split = split
    mparams.n_gpu_layers = config["n_gpu_layers"]
    mparams.split_mode = lib.LLAMA_SPLIT_MODE_LAYER
    mparams.use_mmap = False
    model = lib.llama_model_load_from_file(config["model"].encode(), mparams)
    if not model:
        raise RuntimeError(f"llama.cpp could not load {config['model']}")
    prompt_n, decode_n = config["prompt_tokens"], config["decode_tokens"]
    cparams = lib.llama_context_default_params()
    cparams.n_ctx = prompt_n + decode_n + 16
    cparams.n_batch = cparams.n_ubatch = prompt_n
    cparams.n_threads = cparams.n_threads_batch = config["threads"]
    ctx = lib.llama_init_from_model(model, cparams)
    namespaces, interfaces = config["namespaces"], config["interfaces"]
    prompt = [3 + i % 100 for i in range(prompt_n)]
    out = {"prefill_s": [], "decode_s": [], "prefill_counters": [], "decode_counters": [], "idle_counters": []}
    mem = lib.llama_get_memory(ctx)
    lib.llama_memory_clear(mem, True)
    _decode(lib, ctx, prompt)  # warm-up: graphs built, first GRAPH_COMPUTE sent
    for i in range(2):
        _decode(lib, ctx, [3 + i])
    before = _counters(namespaces, interfaces)
    time.sleep(config["idle_s"])
    out["idle_counters"] = [before, _counters(namespaces, interfaces)]
    for _ in range(config["repeats"]):
        lib.llama_memory_clear(mem, True)
        start_counters = _counters(namespaces, interfaces)
        start = time.perf_counter()
        _decode(lib, ctx, prompt)
        out["prefill_s"].append(time.perf_counter() - start)
        after_prefill = _counters(namespaces, interfaces)
        _decode(lib, ctx, [3])  # the first decode graph after a prompt is sent whole (GRAPH_COMPUTE): not counted
        mid = _counters(namespaces, interfaces)
        steps = []
        for i in range(decode_n):
            start = time.perf_counter()
            _decode(lib, ctx, [4 + i % 100])
            steps.append(time.perf_counter() - start)
        end = _counters(namespaces, interfaces)
        out["decode_s"].append(steps)
        out["prefill_counters"].append([start_counters, after_prefill])
        out["decode_counters"].append([mid, end])
    lib.llama_free(ctx)
    lib.llama_model_free(model)
    return out


def ping(endpoint: str, count: int, gap_s: float) -> dict:
    """Round trips of ggml-rpc's smallest waited command, RPC_CMD_GET_DEVICE_MEMORY (a 4-byte request, a 16-byte
    reply; ggml_backend_rpc_get_device_memory, ggml-rpc.cpp:1141-1149), through the same dispatcher thread and
    socket the model's commands use (a backend held open keeps the connection, get_dispatcher :585-600); `gap_s`
    between them lets a shaped link's bucket refill, so the time is latency, not the rate."""
    lib, _, _, rpc = _libs()
    lib.llama_backend_init()
    rpc.ggml_backend_rpc_init.restype = ctypes.c_void_p
    rpc.ggml_backend_rpc_init.argtypes = [ctypes.c_char_p, ctypes.c_uint32]
    rpc.ggml_backend_rpc_get_device_memory.restype = None
    rpc.ggml_backend_rpc_get_device_memory.argtypes = [ctypes.c_char_p, ctypes.c_uint32,
                                                       ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)]
    backend = rpc.ggml_backend_rpc_init(endpoint.encode(), 0)
    if not backend:
        raise RuntimeError(f"no RPC server at {endpoint}")
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    times = []
    for _ in range(count + 20):
        time.sleep(gap_s)
        start = time.perf_counter()
        rpc.ggml_backend_rpc_get_device_memory(endpoint.encode(), 0, ctypes.byref(free), ctypes.byref(total))
        times.append(time.perf_counter() - start)
    times = sorted(times[20:])
    return {"round_trips": count, "median_s": times[count // 2], "p10_s": times[count // 10],
            "p90_s": times[9 * count // 10]}


def main(argv: list[str]) -> int:
    """`serve HOST:PORT THREADS` or `client CONFIG_JSON` (see the module docstring)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if argv[:1] == ["serve"] and len(argv) == 3:
        serve(argv[1], int(argv[2]))
        return 0
    if argv[:1] == ["ping"] and len(argv) == 4:
        print("RESULT " + json.dumps(ping(argv[1], int(argv[2]), float(argv[3]))), flush=True)
        return 0
    if argv[:1] == ["client"] and len(argv) == 2:
        print("RESULT " + json.dumps(client(json.loads(argv[1]))), flush=True)
        return 0
    print("usage: python -m workbench.measure.engines.rpc_worker serve HOST:PORT THREADS | client CONFIG_JSON | "
          "ping HOST:PORT COUNT GAP_S",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
