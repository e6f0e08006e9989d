"""Binary byte units, defined once: KiB, MiB and GiB as plain ints (exact, so sizes stay integers where they were)."""

from __future__ import annotations

KIB = 2**10
MIB = 2**20
GIB = 2**30
