"""Binary byte units, defined once: KiB, MiB and GiB as plain ints (exact, so sizes stay integers where they were);
the one text form of a time (`format_seconds`)."""

from __future__ import annotations

import math

KIB = 2**10
MIB = 2**20
GIB = 2**30


def mbps_to_bytes_per_s(mbps):
    """Mbit/s (decimal, as links are rated) -> bytes per second; numbers or arrays."""
    return mbps * 1e6 / 8


def bytes_per_s_to_mbps(bytes_per_s):
    """Bytes per second -> Mbit/s (decimal, as links are rated); numbers or arrays."""
    return bytes_per_s * 8 / 1e6


def short_number(value: float) -> str:
    """3 significant digits, no exponent: 1 -> '1', 2.5 -> '2.5', 250 -> '250', 1500 -> '1500'."""
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"


def format_seconds(seconds: float) -> str:
    """A time as '2 ns', '50 µs', '12.3 ms', '2.5 s' or '1234 s' (3 significant digits, no exponent; '0 s'; 'n/a'
    when not finite): the one text form of a time in notes, readouts and chart titles."""
    if not math.isfinite(seconds):
        return "n/a"
    if seconds == 0:
        return "0 s"
    for unit, size in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(seconds) >= size * 0.9995:
            return f"{short_number(seconds / size)} {unit}"
    return f"{short_number(seconds * 1e9)} ns"
