"""The workbench's prediction of TPI-LLM's time to first token and per-token latency on this machine.

Built from the core only: per device, the roofline of one block on its share of heads and FFN
columns (`workbench.accelerator`, on the micro-benchmarked CPU preset split evenly among the
processes that compute at once), plus per block two star all-reduces of the (S, E) activations and
one star broadcast of the embedding per step (`workbench.network` with the fitted loopback alpha and
beta), plus the master's embedding and task head on the whole machine (the workers are idle then).

Not in the model: JAX's per-step host dispatch, Python, and the OS scheduler time-slicing more
processes than there are cores. Where those dominate (small models) the measurement exceeds it.
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.accelerator import layer_latency
from workbench.cluster.microbench import shared_device
from workbench.errors import WorkbenchError, require_int, require_positive
from workbench.hardware import DeviceSpec
from workbench.models import TransformerConfig
from workbench.network import collective_latency

BYTES_FP32 = 4


@dataclass(frozen=True)
class LinkFit:
    """A fitted link class: per-message latency alpha (s) and per-byte cost beta (s/B)."""

    alpha_s: float
    beta_s_per_byte: float

    def __post_init__(self) -> None:
        require_positive("alpha_s", self.alpha_s)
        require_positive("beta_s_per_byte", self.beta_s_per_byte)


def device_slice(cfg: TransformerConfig, n: int) -> TransformerConfig:
    """The block one device computes under an even tensor-parallel split (heads and FFN columns / n)."""
    require_int("n", n, low=1)
    if cfg.n_kv_heads % n or cfg.d_ff % n:
        raise WorkbenchError(f"an even split needs n_kv_heads ({cfg.n_kv_heads}) and d_ff ({cfg.d_ff}) "
                             f"divisible by n ({n})")
    return cfg.with_changes(n_heads=cfg.n_heads // n, n_kv_heads=cfg.n_kv_heads // n, d_ff=cfg.d_ff // n,
                            d_head=cfg.d_head)


def head_latency(cfg: TransformerConfig, device: DeviceSpec, tokens: int) -> float:
    """Roofline seconds of the master's embedding gather, final norm and task head for `tokens` rows."""
    flops = 2.0 * tokens * cfg.d_model * cfg.vocab_size
    bytes_moved = BYTES_FP32 * (cfg.d_model * cfg.vocab_size + tokens * (2 * cfg.d_model + cfg.vocab_size))
    compute = float(device.compute_time(flops, "fp32", "gemm" if tokens > 1 else "gemv"))
    return max(compute, float(device.memory[-1].transfer_time(bytes_moved)))


def tp_step_latency(cfg: TransformerConfig, device: DeviceSpec, link: LinkFit, processes: int, phase: str,
                    seq_len: int, kv_len: int, allreduce: str = "star") -> dict[str, float]:
    """Seconds of one TPI-LLM step (prefill of `seq_len` or one decode at `kv_len`), broken down."""
    share = shared_device(device, processes)
    tokens = seq_len if phase == "prefill" else 1
    compute = cfg.n_layers * layer_latency(device_slice(cfg, processes), share, phase, seq_len,
                                           kv_len if phase == "decode" else None)
    message = tokens * cfg.d_model * BYTES_FP32
    bandwidth = 1.0 / link.beta_s_per_byte
    ar_link, ar_bytes = collective_latency(allreduce, "all_reduce", processes, message, bandwidth, link.alpha_s,
                                           breakdown=True)
    bc_link, bc_bytes = collective_latency(allreduce, "broadcast", processes, message, bandwidth, link.alpha_s,
                                           breakdown=True)
    comm_link = 2 * cfg.n_layers * float(ar_link) + float(bc_link)
    comm_bytes = 2 * cfg.n_layers * float(ar_bytes) + float(bc_bytes)
    master = head_latency(cfg, device, tokens)
    return {"compute_s": compute, "comm_link_latency_s": comm_link, "comm_bytes_s": comm_bytes,
            "master_head_s": master, "latency_s": compute + comm_link + comm_bytes + master}


def predict_generation(cfg: TransformerConfig, device: DeviceSpec, link: LinkFit, processes: int, prompt_len: int,
                       n_new: int, allreduce: str = "star") -> dict[str, float]:
    """Predicted time to first token and median per-token latency (decode at the middle cache length)."""
    require_int("prompt_len", prompt_len, low=1)
    require_int("n_new", n_new, low=1)
    prefill = tp_step_latency(cfg, device, link, processes, "prefill", prompt_len, prompt_len, allreduce)
    decode = tp_step_latency(cfg, device, link, processes, "decode", prompt_len, prompt_len + max(n_new // 2, 1),
                             allreduce)
    return {"ttft_s": prefill["latency_s"], "per_token_s": decode["latency_s"],
            **{f"ttft_{k}": v for k, v in prefill.items() if k != "latency_s"},
            **{f"per_token_{k}": v for k, v in decode.items() if k != "latency_s"}}
