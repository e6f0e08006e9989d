"""Test setup: JAX sees 8 host CPU devices so partitioned kernels run on meshes of 1, 2, 4 and 8."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)
jax.config.update("jax_enable_x64", False)

import pytest  # noqa: E402

MESH_SIZES = (1, 2, 4, 8)


@pytest.fixture(scope="session")
def cpu_devices():
    """The 8 host CPU devices (fails loudly if JAX was initialised elsewhere with fewer)."""
    devices = jax.devices("cpu")
    assert len(devices) >= 8, f"expected 8 CPU devices, got {len(devices)}"
    return devices
