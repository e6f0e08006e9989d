"""TPI-LLM's time to first token and per-token latency on this machine: the arena's TPI-LLM scheme, called.

No cost model of its own: a cluster of `processes` devices, each this machine's CPU preset shared among the
processes (`shared_device`), joined by a link whose bandwidth, wire latency and per-message
endpoint time are the fitted constants of the link class (`workbench.measure.cluster.fit`), is evaluated by
`workbench.schemes.tpi_llm.evaluate_tpi` - the function the arena's registered ``tpi_star_tp`` scheme
calls - with the options that describe the measured program (`E2E_OPTIONS`): every weight resident (no
memory scheduler, no loader), heads split evenly, the star all-reduce, fp32 weights and activations.
"""

from __future__ import annotations

from workbench.core.errors import WorkbenchError, require_int
from workbench.machine.hardware import DeviceSpec
from workbench.machine.network import Link, Topology
from workbench.measure.cluster.collectives import LinkModel, local_share
from workbench.model.models import TransformerConfig
from workbench.schemes.base import SCHEMES, Cluster, SchemeResult, Workload, load_all
from workbench.schemes.tpi_llm import STAR_TP

SCHEME = STAR_TP
BITS_FP32 = 32
# The measured program (workbench.measure.cluster.e2e): weights built in memory before the prompt, an even split
# of heads and FFN columns (the kernel's proportional split on equal devices), TPI-LLM's star.
E2E_OPTIONS = {"scheduler": False, "first_token_loads": False, "split": "equal", "allreduce": "star"}
TOPOLOGY = "direct"  # the fitted L is per traversal of the whole path, so one hop carries it


def shared_device(device, processes: int, share: float | None = None):
    """Each process's share of `device` when `processes` processes compute at the same time on it.

    The preset's rates are for the whole machine (all cores, one process); tensor-parallel processes
    compute concurrently, so each gets `share` of the compute, of the memory bandwidth and of a small
    kernel's streaming rate: 1/processes unless a measured share is given (`colocated_shares`: on this
    machine two processes running the same decode layers each get 0.61 of one alone, four get 0.24; two
    running chains of 1 MiB GEMVs each get 0.55, so a small kernel's rate is shared too, not one core's
    each). The fixed costs (kernel launch, per-layer time) were measured in one process on one core; with
    more processes than cores each process runs on cores/processes of a core, so they stretch by
    processes/cores (`workbench.measure.cluster.collectives.local_share`)."""
    require_int("processes", processes, low=1)
    if processes == 1:
        return device
    share = 1.0 / processes if share is None else float(share)
    if not 0.0 < share <= 1.0:
        raise WorkbenchError(f"share must be a fraction of the machine in (0, 1], got {share!r}")
    stretch = local_share(processes, max(int(device.cores), 1))
    peaks = {k: v * share for k, v in device.peak_flops.items()}
    memory = tuple(level.__class__(level.name, level.capacity_bytes / processes, level.bandwidth_bytes_per_s * share,
                                   level.energy_pj_per_byte) for level in device.memory)
    return device.with_changes(name=f"{device.name} / {processes} processes", peak_flops=peaks, memory=memory,
                               kernel_launch_s=device.kernel_launch_s * stretch,
                               layer_overhead_s=device.layer_overhead_s * stretch,
                               step_overhead_s=device.step_overhead_s * stretch,
                               core_stream_bytes_per_s=device.core_stream_bytes_per_s * share)


def this_machine_cluster(device: DeviceSpec, processes: int, link: LinkModel, share: float | None = None) -> Cluster:
    """`processes` shares of `device` (`share` each, default 1/processes) joined by the fitted link class; they
    are co-located processes of `device`, so serial work (the master's, the others waiting) runs on all of it."""
    require_int("processes", processes, low=1)
    wire = Link(link.bandwidth_bytes_per_s, link.latency_s, name=link.link_class,
                message_overhead_s=link.message_overhead_s)
    return Cluster((shared_device(device, processes, share),) * processes, Topology(TOPOLOGY, processes, wire),
                   shared_machine=device)


def arena_evaluator():
    """`evaluate_tpi` of the module the arena's registered TPI-LLM scheme comes from."""
    import sys

    fn = (SCHEMES.get(SCHEME) or load_all()[SCHEME])[1]
    return sys.modules[fn.__module__].evaluate_tpi, sys.modules[fn.__module__].TPIOptions


def evaluate(cfg: TransformerConfig, cluster: Cluster, phase: str, prompt_len: int, n_new: int) -> SchemeResult:
    """The arena's TPI-LLM evaluation of one phase: prefill of the prompt, or decode steps up to the
    middle of the generated tokens (their median is what is measured)."""
    require_int("prompt_len", prompt_len, low=1)
    require_int("n_new", n_new, low=1)
    evaluate_tpi, options = arena_evaluator()
    decode_tokens = max(n_new // 2, 2)
    workload = Workload(phase, seq_len=prompt_len, kv_len=prompt_len + decode_tokens, weight_bits=BITS_FP32,
                        activation_bits=BITS_FP32)
    return evaluate_tpi(cfg, cluster, workload, options(decode_tokens=decode_tokens, **E2E_OPTIONS))


def predict_generation(cfg: TransformerConfig, device: DeviceSpec, link: LinkModel, processes: int,
                       prompt_len: int, n_new: int, share: float | None = None) -> dict[str, float]:
    """Predicted time to first token and per-token latency with the arena's breakdown of each."""
    cluster = this_machine_cluster(device, processes, link, share)
    out = {}
    for key, phase in (("ttft", "prefill"), ("per_token", "decode")):
        row = evaluate(cfg, cluster, phase, prompt_len, n_new).row()
        out[f"{key}_s"] = row["latency_s"]
        for part in ("compute_s", "memory_s", "fixed_s", "serial_s", "comm_link_latency_s", "comm_bytes_s", "io_stall_s",
                     "other_s"):
            out[f"{key}_{part}"] = row[part]
    return out


def predict_scheme(scheme: str, cfg: TransformerConfig, device: DeviceSpec, link: LinkModel, processes: int,
                   workload: Workload, share: float | None = None) -> dict[str, float]:
    """The arena's registered evaluator of `scheme` on `processes` shares of `device` joined by `link`:
    its latency and breakdown (what the cluster notebook holds the measured kernels to)."""
    schemes = SCHEMES if scheme in SCHEMES else load_all()
    if scheme not in schemes:
        raise WorkbenchError(f"scheme must be a registered scheme ({', '.join(sorted(schemes))}), got {scheme!r}")
    row = schemes[scheme][1](cfg, this_machine_cluster(device, processes, link, share), workload).row()
    parts = ("latency_s", "compute_s", "memory_s", "fixed_s", "serial_s", "comm_link_latency_s", "comm_bytes_s", "io_stall_s",
             "other_s")
    return {part: float(row.get(part, 0.0)) for part in parts}
