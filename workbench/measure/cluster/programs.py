"""The SPMD collective programs the cluster measures: psum, all_gather, psum_scatter and a star all-reduce.

Each program is a `shard_map` over a 1-D mesh (one device per process in a real cluster, or the
8 host devices in tests). Message sizes follow `workbench.machine.network`'s convention: `message_bytes` is
the full buffer per device (for all_gather the gathered result, for psum_scatter the input).

What the runtime executes (XLA's CPU gloo backend, `xla/backends/cpu/collectives/gloo_communicator.cc`):
  * psum          -> gloo allreduce with the RING algorithm (reduce-scatter + all-gather, 2(n-1) steps)
  * all_gather    -> gloo allgather (a ring, n-1 steps)
  * psum_scatter  -> gloo ReduceScatterHalvingDoubling (log2 n steps for powers of two)
  * star          -> TPI-LLM's star (`workbench.kernels.tpi_llm.star_allreduce`, written with `ppermute`):
                     n-1 point-to-point sends to the master, which sums, then n-1 sends back
  * ring_ppermute -> the TPI-LLM kernel's ring all-reduce written with `ppermute` (2(n-1) steps of m/n)
  * tree_ppermute -> the kernel's binary-tree all-reduce with `ppermute` (2 ceil(log2 n) steps of m)
Each `ppermute` is one gloo send/recv per pair, so the ppermute programs are comparable to each other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from workbench.core.errors import require_choice, require_int, require_non_negative

PROGRAMS = ("psum", "all_gather", "psum_scatter", "star", "ring_ppermute", "tree_ppermute")
# (network collective, algorithm the runtime really runs) for each measured program.
RUNTIME_ALGORITHM = {
    "psum": ("all_reduce", "ring"),
    "all_gather": ("all_gather", "ring"),
    "psum_scatter": ("reduce_scatter", "halving_doubling"),
    "star": ("all_reduce", "star"),
    "ring_ppermute": ("all_reduce", "ring"),
    "tree_ppermute": ("all_reduce", "tree"),
}
ELEMENT_BYTES = 4  # float32


@dataclass(frozen=True)
class ProgramInput:
    """Per-device input length and the message size it represents (network convention)."""

    program: str
    n_devices: int
    elements_per_device: int
    message_bytes: int


def program_input(program: str, message_bytes: float, n_devices: int) -> ProgramInput:
    """Round `message_bytes` to whole float32 elements that divide evenly over `n_devices`."""
    require_choice("program", program, PROGRAMS)
    require_int("n_devices", n_devices, low=1)
    require_non_negative("message_bytes", message_bytes)
    elements = max(1, round(message_bytes / ELEMENT_BYTES))
    if program == "all_gather":  # each device contributes a chunk; the message is the gathered buffer
        chunk = max(1, round(elements / n_devices))
        return ProgramInput(program, n_devices, chunk, chunk * n_devices * ELEMENT_BYTES)
    if program == "psum_scatter":  # input divisible by n
        per = max(1, round(elements / n_devices)) * n_devices
        return ProgramInput(program, n_devices, per, per * ELEMENT_BYTES)
    return ProgramInput(program, n_devices, elements, elements * ELEMENT_BYTES)


def make_program(program: str, mesh: Mesh, axis: str = "x") -> Callable:
    """A jitted shard_map running `program` over `mesh`'s `axis` on a (n * elements,) float32 array."""
    require_choice("program", program, PROGRAMS)
    n = mesh.shape[axis]
    if program in ("star", "ring_ppermute", "tree_ppermute"):  # (the kernel module is slow to import)
        from workbench.kernels import tpi_llm

        allreduce = {"star": tpi_llm.star_allreduce, "ring_ppermute": tpi_llm.ring_allreduce,
                     "tree_ppermute": tpi_llm.tree_allreduce}[program]

        def body(x):
            return allreduce(x, axis, n)
    else:
        body = {
            "psum": lambda x: jax.lax.psum(x, axis),
            "all_gather": lambda x: jax.lax.all_gather(x, axis, tiled=True),
            "psum_scatter": lambda x: jax.lax.psum_scatter(x, axis, scatter_dimension=0, tiled=True),
        }[program]
    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P(axis), out_specs=P(axis)))


def device_block(program_input: ProgramInput, global_index: int) -> np.ndarray:
    """Device `global_index`'s input block: every element equals global_index + 1."""
    return np.full(program_input.elements_per_device, global_index + 1, np.float32)


def expected_block(program_input: ProgramInput) -> np.ndarray:
    """What every device holds after the program (same on all devices)."""
    n, e = program_input.n_devices, program_input.elements_per_device
    total = n * (n + 1) / 2
    if program_input.program == "all_gather":
        return np.repeat(np.arange(1, n + 1, dtype=np.float32), e)
    if program_input.program == "psum_scatter":
        return np.full(e // n, total, np.float32)
    return np.full(e, total, np.float32)


def global_input(program_input: ProgramInput, mesh: Mesh, axis: str = "x") -> jax.Array:
    """The global input array, built from this process's devices' blocks (works single- and multi-process)."""
    sharding = NamedSharding(mesh, P(axis))
    devices = list(mesh.devices.flat)
    local = [i for i, d in enumerate(devices) if d.process_index == jax.process_index()]
    data = np.concatenate([device_block(program_input, i) for i in local])
    return jax.make_array_from_process_local_data(sharding, data, (program_input.elements_per_device * len(devices),))


def check_output(program_input: ProgramInput, out: jax.Array) -> None:
    """Raise if any local shard of `out` differs from the expected block."""
    want = expected_block(program_input)
    for shard in out.addressable_shards:
        got = np.asarray(shard.data)
        if got.shape != want.shape or not np.allclose(got, want):
            bad = np.flatnonzero(~np.isclose(got, want)) if got.shape == want.shape else np.array([0])
            raise AssertionError(f"{program_input.program} on {program_input.n_devices} devices: shard {shard.index} "
                                 f"holds {got[:4]}..., expected {want[:4]}... ({got.shape} vs {want.shape}; "
                                 f"{bad.size} elements differ, first at {bad[0]}: {got.flat[bad[0]]})")


def compiled_temp_bytes(program: str, n_devices: int, message_bytes: float) -> int:
    """Bytes of the temporary block XLA's compiled `program` allocates per execution on each device
    (`memory_analysis().temp_size_in_bytes` of the SPMD program): the ppermute kernels keep their
    collective-permutes' outputs there (the star all 2(n-1) of them). Needs `n_devices` local devices."""
    pi = program_input(program, message_bytes, n_devices)
    if len(jax.devices()) < n_devices:
        raise ValueError(f"n_devices must be <= the {len(jax.devices())} local devices, got {n_devices}")
    mesh = Mesh(np.array(jax.devices()[:n_devices]), ("x",))
    shape = jax.ShapeDtypeStruct((n_devices * pi.elements_per_device,), np.float32)
    return int(make_program(program, mesh).lower(shape).compile().memory_analysis().temp_size_in_bytes)
