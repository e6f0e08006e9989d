"""Binary byte units, defined once: KiB, MiB and GiB as plain ints (exact, so sizes stay integers where they were)."""

from __future__ import annotations

KIB = 2**10
MIB = 2**20
GIB = 2**30


def mbps_to_bytes_per_s(mbps):
    """Mbit/s (decimal, as links are rated) -> bytes per second; numbers or arrays."""
    return mbps * 1e6 / 8


def bytes_per_s_to_mbps(bytes_per_s):
    """Bytes per second -> Mbit/s (decimal, as links are rated); numbers or arrays."""
    return bytes_per_s * 8 / 1e6
