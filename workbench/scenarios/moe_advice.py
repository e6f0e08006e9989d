"""Why more devices stop helping a mixture of experts: the MoE-specific reasons, as data `whatif --devices` and the
"will more boards help?" analysis (`workbench.scenarios.scaling`, when present) print beside the component that grows.

A dense model's weights shrink per device as 1/n under tensor parallelism; a MoE layer's do not all shrink:
every device of a tensor-parallel split (distributed-llama v0.16, exo's tensor mode) still streams the whole
replicated router (f32 in both engines: `schemes.common.ROUTER_BITS`) and its 1/n slice of the k active experts,
while the partial sums it exchanges after attention and after the MoE block grow with n. A layer pipeline
(llama.cpp RPC, prima.cpp, exo's pipeline mode) keeps a layer's experts together: more devices only hold more
of the experts in memory, which helps until every expert is resident and then adds hand-offs. Expert
parallelism spreads the experts, so a token's k experts sit on up to k devices and the all-to-all per MoE layer
reaches more peers. The numbers here are the model's own sizes (parameters x bits), not a second cost model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from workbench.core.errors import WorkbenchError, require_int, require_positive
from workbench.core.units import GIB, MIB
from workbench.model.models import TransformerConfig
from workbench.schemes.base import spec_of
from workbench.schemes.common import ROUTER_BITS

# How a scheme partitions a MoE layer (issue 33) is its catalogue partition (`SchemeSpec.partition`,
# `partition_of`); the partitions with MoE reasons (`REASONS`) are described in words here.
PARTITION_WORDS = {"tp": "tensor parallel inside every expert", "pipeline": "whole layers with all their experts",
                   "expert": "expert parallelism (all-to-all)", "one": "one device"}

# The MoE reason for each latency component that can grow with the device count (`workbench.scenarios.scaling.CAUSES`
# keys, plus "oom" and "flat"), per partition; {placeholders} are filled from `MoeNumbers`.
REASONS = {
    "tp": {
        "memory_s": "each device still streams the whole f32 router ({router}) and its 1/n share of the {k} active "
                    "experts ({experts_share}); from {router_wins} devices on the router outweighs the experts' share",
        "comm_link_latency_s": "the sync per layer grows: {syncs} syncs per token (after attention and after the MoE "
                               "block), each a message to every one of the n-1 peers",
        "comm_bytes_s": "each sync gathers n-1 partial sums of the full hidden size ({partial} each), so a device "
                        "receives {sync_bytes} per token at n devices while its share of the {k} experts shrinks",
        "serial_s": "the root still runs the embedding, the output head and the merge of the partials alone",
        "fixed_s": "every device still launches the router and each of the {k} experts' kernels per layer",
        "oom": "every device holds the replicated router and 1/n of all {n_experts} experts of every layer",
        "flat": "the router and the synchronisation do not shrink with n",
        "why": "each device still streams the whole f32 router ({router}) and its share of the {k} active experts "
               "({experts_share} at the largest count); the sync per layer grows ({sync_bytes} received per token)",
    },
    "pipeline": {
        "io_stall_s": "a layer's {n_experts} experts live on its device; experts that do not fit stream from storage",
        "comm_link_latency_s": "a token passes the devices in turn: one more hand-off per added device, and a layer's "
                               "{k} active experts still run on one device",
        "comm_bytes_s": "one more activation hand-off per added device; no step gets shorter",
        "memory_s": "a token's step still streams every layer's attention and {k} experts ({active}), one device "
                    "after another; from {resident_at} devices every expert is resident and more only add hand-offs",
        "flat": "a token visits every layer in turn: more devices hold more experts, they do not shorten a step "
                "(all experts resident from {resident_at} devices)",
        "oom": "a layer with all its {n_experts} experts ({layer}) must fit on one device",
        "why": "a token visits every layer in turn: more devices hold more experts (all resident from {resident_at} "
               "devices), they do not shorten a step, and each adds a hand-off",
    },
    "expert": {
        "comm_link_latency_s": "the all-to-all per MoE layer reaches more peers: a token's {k} experts sit on up to "
                               "{k} devices",
        "comm_bytes_s": "dispatch and combine move each token's hidden state to and from the devices of its {k} "
                        "experts, twice per MoE layer",
        "memory_s": "the slowest device serves the most popular experts: its load falls slower than 1/n",
        "flat": "the slowest device's expert load stops falling once each device holds few experts",
        "why": "the all-to-all per MoE layer reaches more peers and the slowest device serves the most popular "
               "experts",
    },
}


@dataclass(frozen=True)
class MoeNumbers:
    """A MoE model's sizes that the reasons quote, at one weight precision and device count."""

    model: TransformerConfig
    weight_bits: float
    n_devices: int
    activation_bits: float = 16.0
    memory_per_device_bytes: float = math.inf

    def __post_init__(self) -> None:
        if not self.model.is_moe:
            raise WorkbenchError(f"{self.model.name} is dense: MoE reasons need a mixture of experts (n_experts > 0)")
        require_positive("weight_bits", self.weight_bits)
        require_positive("activation_bits", self.activation_bits)
        require_int("device count", self.n_devices, low=1)

    @property
    def router_bytes(self) -> float:
        """The replicated f32 routers of every MoE layer: what each TP device streams per token, whatever n."""
        return self.model.moe_layers * self.model.router_params() * ROUTER_BITS / 8

    def experts_bytes(self) -> float:
        """All MoE layers' k routed + shared experts at the weight precision (one token's expert reads)."""
        m = self.model
        return m.moe_layers * m.experts_per_token * m.expert_params() * self.weight_bits / 8

    def router_wins(self) -> int:
        """The smallest device count at which a TP device's f32 router bytes reach its share of the k experts."""
        return max(1, math.ceil(self.experts_bytes() / self.router_bytes))

    def resident_at(self) -> int:
        """Devices of this memory that hold every weight of the model (a layer pipeline's experts all resident)."""
        if not math.isfinite(self.memory_per_device_bytes):
            return 1
        return max(1, math.ceil(self.model.weight_bytes(self.weight_bits) / self.memory_per_device_bytes))

    def sync_bytes(self) -> float:
        """Bytes a TP device receives per token: 2 syncs per layer, n-1 partial sums of d_model each."""
        return 2 * self.model.n_layers * (self.n_devices - 1) * self.partial_bytes()

    def partial_bytes(self) -> float:
        """One partial sum of the hidden state at the activation precision."""
        return self.model.d_model * self.activation_bits / 8

    def fields(self) -> dict[str, str]:
        """The placeholders of `REASONS`, formatted."""
        m = self.model
        layer = (m.moe_ffn_params() + m.attention_params()) * self.weight_bits / 8
        return {"router": _bytes(self.router_bytes), "k": str(m.n_active_experts), "n_experts": str(m.n_experts),
                "experts_share": _bytes(self.experts_bytes() / self.n_devices), "router_wins": str(self.router_wins()),
                "syncs": str(2 * m.n_layers), "partial": _bytes(self.partial_bytes()),
                "sync_bytes": _bytes(self.sync_bytes()), "resident_at": str(self.resident_at()),
                "active": _bytes(m.active_params(include_embedding=False) * self.weight_bits / 8),
                "layer": _bytes(layer)}


def _bytes(n: float) -> str:
    """'1.2 GiB' / '48.0 MiB' / '4.0 KiB'."""
    if n >= GIB:
        return f"{n / GIB:.2f} GiB"
    return f"{n / MIB:.1f} MiB" if n >= MIB else f"{n / 1024:.1f} KiB"


def partition_of(scheme: str) -> str:
    """The partition of a registered scheme, as its catalogue spec gives it (`catalogue.PARTITIONS`)."""
    return spec_of(scheme).partition


def moe_reason(numbers: MoeNumbers, scheme: str, cause: str) -> str:
    """The MoE-specific reason why `cause` (a latency component, "oom" or "flat") grows for `scheme` past the
    best device count, "" where the partition or the cause has none."""
    text = REASONS.get(partition_of(scheme), {}).get(cause, "")
    return text.format(**numbers.fields()) if text else ""


def moe_summary(numbers: MoeNumbers) -> list[str]:
    """Model-level lines for `whatif --devices` on a MoE model: what a device streams per token under TP at the
    largest count tried, where the router outweighs the experts, and from how many devices every expert is
    resident."""
    m, f = numbers.model, numbers.fields()
    return [f"{m.name}: {m.n_experts} experts per layer, {m.n_active_experts} routed per token"
            + (f" + {m.n_shared_experts} shared" if m.n_shared_experts else "")
            + f"; {m.active_params() / 1e9:.2f} B of {m.total_params() / 1e9:.2f} B parameters per token",
            f"tensor parallel inside every expert: at {numbers.n_devices} devices each streams the whole f32 "
            f"router ({f['router']}) and {f['experts_share']} of experts per token; the router outweighs the "
            f"experts' share from {f['router_wins']} devices; syncs receive {f['sync_bytes']} per token",
            f"whole layers per device: the weights alone fill {f['resident_at']} devices' memory (a lower bound on "
            f"where every expert is resident: the KV cache, the runtime and each scheme's placement add to it, and "
            f"the table's rows say where each fits); past that, more devices add hand-offs and shorten no step"]


def stop_notes(numbers: MoeNumbers, stops) -> list[str]:
    """'<scheme>: MoE: <reason>' for each stop-helping answer (objects with `scheme` and `cause`, such as
    `workbench.scenarios.scaling.StopHelping`) whose partition has a reason for its cause."""
    notes = []
    for stop in stops:
        reason = moe_reason(numbers, stop.scheme, getattr(stop, "cause", "") or "")
        if reason:
            notes.append(f"{stop.scheme}: MoE: {reason}")
    return notes


def scheme_notes(numbers: MoeNumbers, best: dict[str, tuple]) -> list[str]:
    """Per scheme, from `best` = scheme -> (fastest device count, the next count tried that ran or None, its
    status[, the first larger count the scheme cannot split the model at, its n/a reason]): where the scheme is
    fastest, its partition's MoE reason why more devices stop helping there, and where it cannot split."""
    notes = []
    for scheme, (count, after, status, *unsplit) in best.items():
        kind = partition_of(scheme)
        if kind not in REASONS:  # one device, or a partition without MoE reasons
            continue
        words = f"{scheme} ({PARTITION_WORDS[kind]}): fastest at {count} device" + ("" if count == 1 else "s")
        if after is None:
            words += "" if unsplit else ", the largest count tried"
        else:
            why = REASONS[kind].get("oom" if status == "OOM" else "why", "")
            words += f", not faster at {after}" + (f"; MoE: {why.format(**numbers.fields())}" if why else "")
        if unsplit:
            words += f"; cannot split the model at {unsplit[0]}: {unsplit[1].removeprefix('n/a: ')}"
        notes.append(words)
    return notes
