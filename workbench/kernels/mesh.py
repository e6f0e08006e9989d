"""Meshes for the partitioned kernels: the first n devices of the default backend on named axes."""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh

from workbench.core.errors import WorkbenchError, require_int


def make_mesh(n_devices: int, axis: str = "x") -> Mesh:
    """A 1-D mesh over the first `n_devices` devices (Auto axes, so shard_map accepts unsharded inputs)."""
    available = len(jax.devices())
    require_int("n_devices", n_devices, low=1, high=available)
    return Mesh(np.array(jax.devices()[:n_devices]), (axis,))


def make_grid_mesh(rows: int, cols: int, axes: tuple[str, str] = ("row", "col")) -> Mesh:
    """A 2-D mesh rows x cols (for 2-D tiled schemes)."""
    available = len(jax.devices())
    if rows * cols > available:
        raise WorkbenchError(f"a {rows}x{cols} grid needs {rows * cols} devices; only {available} are available")
    return Mesh(np.array(jax.devices()[: rows * cols]).reshape(rows, cols), axes)


def check_line_mesh(mesh) -> int:
    """The size of `mesh`, which must be a 1-D jax Mesh (one line error otherwise)."""
    if not isinstance(mesh, Mesh) or len(mesh.axis_names) != 1:
        raise WorkbenchError(f"mesh must be a 1-D jax.sharding.Mesh (e.g. make_mesh(n)), got {mesh!r}")
    return int(mesh.devices.size)


class OnLineMesh:
    """What a model laid out on a 1-D mesh knows of it (a mixin for parameter classes holding `mesh`)."""

    mesh: Mesh

    @property
    def axis(self) -> str:
        """The mesh axis the program runs over."""
        return self.mesh.axis_names[0]

    @property
    def n(self) -> int:
        """Devices in the mesh."""
        return int(self.mesh.devices.size)

    @property
    def first_device(self):
        """Mesh position 0: the device that embeds, samples and holds the task head."""
        return self.mesh.devices.flat[0]


def stack_over_mesh(per_device: list[dict], keys, mesh: Mesh) -> dict:
    """Per-layer dicts of (n, ...) arrays -> {key: (n, L, ...) array sharded on `mesh`'s axis}."""
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    sharding = NamedSharding(mesh, P(mesh.axis_names[0]))
    return {k: jax.device_put(np.stack([layer[k] for layer in per_device], axis=1), sharding) for k in keys}


def on_first_device(mesh: Mesh, arrays: dict) -> dict:
    """`arrays` committed to mesh position 0, or {} in every other process (only that process holds them)."""
    first = mesh.devices.flat[0]
    if first.process_index != jax.process_index():
        return {}
    return {k: jax.device_put(v, first) for k, v in arrays.items()}
