"""Bytes a mixture-of-experts layer's partitions move between devices: the closed forms the MoE schemes
(`schemes.moe`) cost and the compiled shard_map kernels (`kernels.moe`) are checked against, one per partition
(JAX-free). Every function gives the bytes of the result buffer each device holds after the collective
(what `kernels.traffic.compiled_collectives` reads from the HLO), per MoE layer and step of `tokens` tokens.
tests/test_kernels_moe.py holds each to the compiled `kernels.moe` program on 2, 4 and 8 devices: TP's one
all-gather (n x tokens x d_model) or one all-reduce (tokens x d_model), the pipeline's `plan.handoffs`
collective-permutes of tokens x d_model, expert parallelism's two all-to-alls of n_experts x capacity x d_model.
On one device nothing is compiled and every function gives 0 (the hand-off is per hand-off: a lone master
makes none).
"""

from __future__ import annotations

from workbench.core.errors import require_int, require_positive


def _check(n: int, tokens: int, bits: float) -> None:
    """One line unless n >= 1 devices, tokens >= 1 and bits > 0."""
    require_int("devices", n, low=1)
    require_int("tokens", tokens, low=1)
    require_positive("bits", bits)


def tp_partials_allgather_bytes(d_model: int, n: int, tokens: int, bits: float) -> float:
    """TP inside every expert, distributed-llama's sync: each device's full-width partial sum of the block's
    output, all-gathered (n partials of tokens x d_model) and added locally; one sync per block."""
    _check(n, tokens, bits)
    return float(n * tokens * d_model * bits / 8) if n > 1 else 0.0


def tp_psum_bytes(d_model: int, n: int, tokens: int, bits: float) -> float:
    """TP inside every expert, exo's `all_sum`: the block's output partials summed in place (one all-reduce
    of tokens x d_model); one per block."""
    _check(n, tokens, bits)
    return float(tokens * d_model * bits / 8) if n > 1 else 0.0


def pipeline_handoff_bytes(d_model: int, tokens: int, bits: float) -> float:
    """A whole-layer pipeline: the activations (tokens x d_model) handed to the next device at a stage edge."""
    _check(1, tokens, bits)
    return float(tokens * d_model * bits / 8)


def ep_no_drop_capacity(tokens: int, n: int) -> int:
    """Expert parallelism's slots per expert per source device that no routing can overflow: the tokens one
    device holds (tokens / n, rounded up), since a token picks an expert at most once."""
    _check(n, tokens, 1.0)
    return -(-tokens // n)


def ep_all_to_all_bytes(d_model: int, n_experts: int, n: int, capacity: int, bits: float) -> float:
    """Expert parallelism: the dispatch and the combine all-to-all, each leaving every device a buffer of
    n_experts x capacity x d_model (n sources x its n_experts/n experts x capacity slots, or back); `capacity`
    is the slots each expert keeps per source device, so the bytes do not depend on the routing."""
    _check(n, 1, bits)
    require_int("n_experts", n_experts, low=1)
    require_int("capacity", capacity, low=1)
    return float(2 * n_experts * capacity * d_model * bits / 8) if n > 1 else 0.0
