"""Will more boards help? (issue 34 item 4): on constructed device-count rows each cause is named, the n/a
counts are listed with their reason, and `whatif --devices 1,2,4,8,16` prints a stop-helping line per scheme."""

import math
import subprocess
import sys

import pandas as pd
import pytest

from workbench.core.errors import WorkbenchError
from workbench.core.io import REPO_ROOT
from workbench.scenarios.scaling import CAUSES, StopHelping, stop_helping, stop_helping_all

COMPONENTS = tuple(CAUSES)


def _row(devices: int, status: str = "ok", notes: str = "", **parts) -> dict:
    row = {"devices": devices, "status": status, "notes": notes, **dict.fromkeys(COMPONENTS, 0.0)}
    if status == "n/a":
        row.update(dict.fromkeys(COMPONENTS, math.nan))
    row.update(parts)
    row["latency_s"] = math.nan if status == "n/a" else sum(row[c] for c in COMPONENTS)
    return row


def _scaling(grow: str, amount: float = 0.01) -> list[dict]:
    """Memory time halves with each doubling; `grow` adds `amount` x (n - 1) seconds: latency falls, then rises."""
    return [_row(n, memory_s=0.4 / n, **{grow: amount * (n - 1)}) for n in (1, 2, 4, 8, 16)]


@pytest.mark.parametrize("cause", ["comm_link_latency_s", "comm_bytes_s", "serial_s", "io_stall_s"])
def test_each_cause_is_named(cause):
    got = stop_helping("s", _scaling(cause, 0.02))
    # latency 0.4/n + 0.02 (n-1): 0.4, 0.22, 0.16, 0.19, ... -> the fastest is 4, the next tried 8
    assert (got.best, got.next, got.cause) == (4, 8, cause)
    assert got.growth_s == pytest.approx(0.02 * 4)
    assert CAUSES[cause] in got.line() and "stops helping at 4 devices" in got.line()


def test_the_largest_grower_wins_over_a_smaller_one():
    rows = [_row(n, memory_s=0.4 / n, serial_s=0.005 * n, comm_bytes_s=0.03 * (n - 1)) for n in (1, 2, 4, 8)]
    assert stop_helping("s", rows).cause == "comm_bytes_s"


def test_the_next_count_out_of_memory_is_a_memory_level_falling_out():
    rows = [_row(1, memory_s=0.4), _row(2, memory_s=0.2), _row(4, "OOM", memory_s=0.1)]
    got = stop_helping("s", rows)
    assert (got.best, got.next, got.cause) == (2, 4, "oom") and "OOM" in got.line()


def test_counts_that_cannot_split_the_model_are_listed_with_the_reason():
    rows = [_row(1, memory_s=0.4), _row(2, memory_s=0.2), _row(3, "n/a", "n_devices must divide 32; got 3"),
            _row(4, memory_s=0.1)]
    got = stop_helping("s", rows)
    assert got.still_falling and got.best == 4 and got.unsplittable == ((3, "n_devices must divide 32; got 3"),)
    assert "still falling at 4 devices" in got.line() and "cannot split the model at 3: n_devices must divide 32" \
        in got.line()


def test_flat_and_never_fitting_schemes_say_so():
    flat = stop_helping("local", [_row(n, memory_s=0.3) for n in (1, 2, 4)])
    assert flat.cause == "flat" and "do not help" in flat.line()
    never = stop_helping("big", [_row(n, "OOM", memory_s=0.3) for n in (1, 2)])
    assert never.best is None and "no device count" in never.line()


def test_one_row_per_scheme_and_count_and_the_needed_columns():
    frame = pd.DataFrame([_row(1, memory_s=1.0), _row(1, memory_s=2.0)])
    with pytest.raises(WorkbenchError, match="one row per device count"):
        stop_helping("s", frame)
    with pytest.raises(WorkbenchError, match="missing latency_s"):
        stop_helping("s", [{"devices": 1, "status": "ok", "notes": ""}])
    with pytest.raises(WorkbenchError, match="next device count must exceed"):
        StopHelping("s", 4, 0.1, 2, "serial_s", 0.0)
    both = pd.DataFrame([{**r, "scheme": s} for s in ("a", "b") for r in _scaling("serial_s", 0.02)])
    assert [a.scheme for a in stop_helping_all(both)] == ["a", "b"]


def test_whatif_devices_prints_a_stop_helping_line_per_scheme():
    from workbench.schemes.base import load_all

    out = subprocess.run([sys.executable, "-m", "workbench", "whatif", str(REPO_ROOT / "examples" / "sbc_gigabit.toml"),
                          "--devices", "1,2,4,8,16", "--no-charts"], capture_output=True, text=True, check=True,
                         cwd=REPO_ROOT).stdout
    block = out.split("will more devices help (decode)?\n", 1)[1].split("\n(")[0].splitlines()
    schemes = sorted(load_all())
    grouped = [line for line in block if line.strip().startswith("does not apply at any count")]
    named = [line.split(":")[0].strip() for line in block if line not in grouped]
    named += [name for line in grouped for name in line.split(": ", 2)[1].split(", ")]
    assert sorted(named) == schemes  # every scheme once: its own line, or a line of those that never apply
    assert any("moe_layer_pipeline" in line and "dense (n_experts = 0)" in line for line in grouped)  # MoE-only: n/a
    words = ("stops helping at", "still falling at", "do not help", "no device count", "does not apply")
    assert all(any(w in line for w in words) for line in block)
    # the 13B model's 40 KV heads: distributed-llama cannot split it over 16 boards
    dllama = next(line for line in block if line.strip().startswith("dllama_allgather_tp:"))
    assert "cannot split the model at 16: n_devices must divide n_kv_heads (40)" in dllama


def test_device_sweep_repeats_the_first_device_and_the_frame_answers_per_scheme():
    from workbench.scenarios.scaling import device_sweep, stop_helping_frame
    from workbench.scenarios.userconfig import load_config

    config = load_config(REPO_ROOT / "examples" / "sbc_gigabit.toml")
    sweep = device_sweep(config, [1, 2])
    assert sorted(set(sweep.devices)) == [1, 2] and set(sweep.phase) == {"decode"}
    assert sweep.groupby("devices").scheme.nunique().nunique() == 1  # every scheme at every count
    frame = stop_helping_frame(stop_helping_all(sweep))
    assert list(frame.scheme) == list(dict.fromkeys(sweep.scheme))
    assert all(answer.startswith(f"{s}: ") for s, answer in zip(frame.scheme, frame.answer))
    with pytest.raises(WorkbenchError, match=r"device counts must be integers in \[1, 1024\], got 0"):
        device_sweep(config, [0])
