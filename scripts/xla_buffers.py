"""Rewrite data/cluster/xla_buffers.csv: each measured program's per-execution temp block as XLA compiles it.

The cost model (`workbench.measure.cluster.collectives.fresh_buffers`) reads the ratio temp bytes / message bytes per program
and process count; a test recompiles a few entries and compares. Run after a JAX upgrade:
`.venv/bin/python scripts/xla_buffers.py` (then review the diff).
"""

from __future__ import annotations

import datetime

import jax

jax.config.update("jax_num_cpu_devices", 8)

import pandas as pd  # noqa: E402

from workbench.core.io import write_csv_atomic  # noqa: E402
from workbench.measure.cluster.collectives import XLA_BUFFER_MESSAGE_BYTES, XLA_BUFFERS_PATH  # noqa: E402
from workbench.measure.cluster.programs import PROGRAMS, compiled_temp_bytes, program_input  # noqa: E402


def main() -> None:
    rows = []
    for n in range(2, 9):
        for program in PROGRAMS:
            m = program_input(program, XLA_BUFFER_MESSAGE_BYTES, n).message_bytes
            temp = compiled_temp_bytes(program, n, m)
            rows.append({"program": program, "processes": n, "message_bytes": m, "temp_bytes": temp,
                         "temp_per_message_byte": round(temp / m, 6), "kind": "derived",
                         "source": f"jax {jax.__version__} CPU, jit(shard_map).lower().compile().memory_analysis()"
                                   ".temp_size_in_bytes (scripts/xla_buffers.py)",
                         "date": datetime.date.today().isoformat()})
    path = write_csv_atomic(XLA_BUFFERS_PATH, pd.DataFrame(rows))
    print(f"wrote {path}: {len(rows)} rows")


if __name__ == "__main__":
    main()
