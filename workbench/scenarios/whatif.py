"""`python -m workbench whatif FILE.toml`: the arena on your own devices, network and model.

Prints the arena table (TTFT, time per token, tokens/s, memory, the decode breakdown or the full n/a reason) and
the best scheme per phase, and writes arena.csv, memory.csv, breakdown.csv and the breakdown / ranking / memory
charts as SVG (plus PNG with `--png`) to --out or figures/whatif/<file stem>/; with --no-charts nothing is
written unless --out is given. Several values of --devices / --set sweep them (sweep.csv and the best scheme per
point). Kept light on purpose so the command answers in under 2 s on a 2-core machine (benchmarks/bench_arena.py):
no altair import (the charts are plain Vega-Lite specs), and PNG rasterising (~0.3 s for three charts) only on
request.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import math
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd

from workbench.core.errors import WorkbenchError
from workbench.core.io import FIGURES_DIR, writable_folder
from workbench.core.units import bytes_per_s_to_mbps, format_seconds
from workbench.machine.hardware import budget_notices, efficiency_notices
from workbench.machine.kernel_cost import undescribed_notices
from workbench.scenarios.arena import GIB, Arena, arena_for_config, cluster_label
from workbench.scenarios.userconfig import check_key, parse_model, parse_values, read_document, set_key
from workbench.schemes.galaxy import LOCAL

SHORT = {"memory_s": "memory", "compute_s": "compute", "fixed_s": "fixed", "serial_s": "serial", "comm_link_latency_s": "msg",
         "comm_bytes_s": "bytes", "io_stall_s": "IO", "other_s": "other"}


def breakdown_text(row) -> str:
    """'compute 61% fixed 4% msg 30% ...': where one step's time goes (components of 1 % or more)."""
    total = row.latency_s
    if math.isnan(total) or total <= 0:
        return ""
    parts = [(label, getattr(row, key) / total) for key, label in SHORT.items()]
    return " ".join(f"{label} {share:.0%}" for label, share in parts if share >= 0.005)


def format_table(arena: Arena) -> str:
    """The arena as a fixed-width text table (seconds in engineering units, OOM / n/a marked, tokens/s of the
    decode step), with what bounds the decode step ("decode bound by": the time per token's, not the TTFT's), its
    breakdown per scheme and the full reason for every n/a."""
    wide = arena.wide()
    long = arena.table().set_index(["scheme", "phase"])

    def cell(seconds, status):
        if status == "n/a" or math.isnan(seconds):
            return "n/a"
        return f"{format_seconds(seconds)} OOM" if status == "OOM" else format_seconds(seconds)

    rows = [{"scheme": r.scheme, "paper": r.paper,
             "TTFT": cell(getattr(r, "ttft_s", math.nan), getattr(r, "prefill_status", "n/a")),
             "time/token": cell(getattr(r, "time_per_token_s", math.nan), getattr(r, "decode_status", "n/a")),
             "tokens/s": _rate(getattr(r, "time_per_token_s", math.nan), getattr(r, "decode_status", "n/a")),
             "peak mem/device": "" if math.isnan(r.peak_memory_gib) else f"{r.peak_memory_gib:.2f} GiB",
             "of budget": "" if math.isnan(r.memory_use) else f"{r.memory_use:.0%}",
             "decode bound by": _bound(long, r.scheme), "time/token breakdown": _detail(long, r.scheme)}
            for r in wide.itertuples()]
    return pd.DataFrame(rows).to_string(index=False)


def tokens_per_s(seconds_per_token: float) -> float:
    """Decode rate, 1 / time per token (NaN when the time is missing or not positive)."""
    return 1.0 / seconds_per_token if seconds_per_token > 0 else math.nan


def _rate(seconds_per_token: float, status: str) -> str:
    """'12.3' tokens/s for a decode step that ran (OOM marked), 'n/a' otherwise."""
    rate = tokens_per_s(seconds_per_token)
    if status == "n/a" or math.isnan(rate):
        return "n/a"
    return f"{rate:.3g} OOM" if status == "OOM" else f"{rate:.3g}"


def _detail(long: pd.DataFrame, scheme: str) -> str:
    """The decode breakdown, or why the scheme does not apply (its whole n/a reason, never cut)."""
    if (scheme, "decode") not in long.index:
        return ""
    row = long.loc[(scheme, "decode")]
    if row["status"] == "n/a":
        reason = " ".join(str(row["notes"]).split()) or "does not apply"
        return f"n/a: {reason}"
    return breakdown_text(row)


def best_schemes(table: pd.DataFrame) -> dict[str, str]:
    """Phase -> the fastest scheme that runs within memory ('ok'); on a tie `local` (else the first by name)."""
    best = {}
    for phase, group in table[table["status"] == "ok"].groupby("phase", sort=False):
        fastest = group["latency_s"].min()
        tied = sorted(group.loc[group["latency_s"] <= fastest * (1 + 1e-12), "scheme"])
        best[phase] = LOCAL if LOCAL in tied else tied[0]
    return best


def best_line(arena: Arena) -> str:
    """'best: prefill local (TTFT 1.2 s), decode megatron_tp (85.0 ms/token, 11.8 tokens/s)'."""
    table = arena.table()
    latency = table.set_index(["phase", "scheme"])["latency_s"]
    parts = []
    for phase, scheme in best_schemes(table).items():
        t = latency[(phase, scheme)]
        what = f"TTFT {format_seconds(t)}" if phase == "prefill" else \
            f"{format_seconds(t)}/token, {tokens_per_s(t):.3g} tokens/s"
        parts.append(f"{phase} {scheme} ({what})")
    return "best: " + (", ".join(parts) if parts else "none runs within memory")


HELP_EPILOG = """\
output: the table goes to stdout. Files are written into --out, or, when --out is not given, into
figures/whatif/<file stem>/ (a single run: arena.csv, memory.csv, breakdown.csv and the charts; a sweep:
sweep.csv). With --no-charts nothing is written unless --out is given (then only the CSVs).
A --devices / --set with one value per key is a single run (table and charts); several values sweep them. A value
that holds commas goes in quotes (--set 'schemes.llamacpp.tensor_split="3,1,1,1"'), or a tensor_split uses ':'
(3:1:1:1). A sweep of a file with a [speculative] table (e.g. --set speculative.gamma=1,4,16 --set
speculative.alpha=0.5,0.9) adds the time per token with the draft, its speed-up and the best gamma to sweep.csv.
The "decode bound by" column names the largest component of each scheme's decode step.
--seq-len sets the prompt (workload.seq_len) only; --kv-len sets the tokens each decode step attends
(workload.kv_len; a file that states none attends the whole prompt, as without the option)."""


def _bound(long: pd.DataFrame, scheme: str) -> str:
    """What bounds the scheme's decode step (`SchemeResult.bound`), "" where it does not apply."""
    if (scheme, "decode") not in long.index or long.loc[(scheme, "decode")]["status"] == "n/a":
        return ""
    return str(long.loc[(scheme, "decode")]["bound"])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `python -m workbench whatif`."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = HELP_EPILOG
    parser.add_argument("config", metavar="FILE.toml", help="devices, network and model (see examples/)")
    parser.add_argument("--out", default=None,
                        help="output folder (default: figures/whatif/<file stem>/, none with --no-charts)")
    parser.add_argument("--no-charts", action="store_true",
                        help="no charts; print only, unless --out names a folder for the CSVs")
    parser.add_argument("--png", action="store_true", help="also write each chart as PNG (2x; ~0.3 s more)")
    parser.add_argument("--seq-len", type=int, default=None, metavar="N",
                        help="prompt length: overrides workload.seq_len only")
    parser.add_argument("--kv-len", type=int, default=None, metavar="N",
                        help="tokens attended per decode step: overrides workload.kv_len")
    parser.add_argument("--devices", default=None, metavar="N[,N...]",
                        help="device count (a config with one [[devices]] entry), e.g. 1,2,4,8; several sweep it")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=V[,V...]",
                        help="override a TOML key (dotted, e.g. network.bandwidth_mbps=100,1000 or "
                             "devices[0].kernel_launch_us=20); several values sweep it; a value with commas in "
                             "quotes: schemes.llamacpp.tensor_split='\"3,1,1,1\"' (or 3:1:1:1)")


# ---- sweeps: --devices and --set ------------------------------------------------------------------
def parse_set(text: str) -> tuple[str, list]:
    """'network.bandwidth_mbps=100,1000' -> ('network.bandwidth_mbps', [100, 1000])."""
    key, sep, values = text.partition("=")
    if not sep or not key.strip():
        raise WorkbenchError(f"--set must be KEY=VALUE[,VALUE...] (e.g. network.bandwidth_mbps=100), got {text!r}")
    return check_key("--set", key.strip()), parse_values(f"--set {key.strip()}", values)


def sweep_points(table: dict, devices: list | None, sets: list[tuple[str, list]]) -> list[tuple[dict, dict]]:
    """Every combination of the swept values: (label -> value, the TOML document with them applied)."""
    axes = ([("devices", devices)] if devices else []) + sets
    points = []
    for combo in itertools.product(*[values for _, values in axes]):
        doc = copy.deepcopy(table)
        label = {}
        for (key, _), value in zip(axes, combo):
            label[key] = value
            if key == "devices":
                entries = doc.get("devices")
                if not isinstance(entries, list) or len(entries) != 1:
                    raise WorkbenchError("--devices needs a config with exactly one [[devices]] entry (set counts "
                                         "of several with --set devices[i].count=...)")
                if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 1024:
                    raise WorkbenchError(f"--devices values must be integers in [1, 1024], got {value!r}")
                entries[0]["count"] = value
            else:
                set_key(doc, key, value)
        points.append((label, doc))
    return points


def set_lengths(doc: dict, seq_len: int | None, kv_len: int | None, where: str, base_dir: Path | None = None) -> dict:
    """The document with --seq-len as workload.seq_len and --kv-len as workload.kv_len (each only when given),
    each checked against the document's model: one line naming the option and its range."""
    lengths = {"seq_len": seq_len, "kv_len": kv_len}
    if all(v is None for v in lengths.values()):
        return doc
    model = parse_model(where, doc.get("model", {}), base_dir)[0] if isinstance(doc.get("model"), dict) else None
    high = model.max_positions if model is not None else 1 << 20
    for key, value in lengths.items():
        if value is None:
            continue
        if not 1 <= value <= high:
            of = f" for {model.name}" if model is not None else ""
            raise WorkbenchError(f"--{key.replace('_', '-')} must be in [1, {high}]{of}, got {value}")
        set_key(doc, f"workload.{key}", value, f"--{key.replace('_', '-')}")
    return doc


def sweep_table(points: list[tuple[dict, dict]], where: str, base_dir: Path | None,
                keep: list | None = None) -> pd.DataFrame:
    """One row per sweep point and scheme: TTFT, time per token, tokens/s, statuses and the decode breakdown, and
    with a [speculative] table its columns (`speculation_columns`; each point's arena table, labelled, appended
    to `keep` when given: `stop_helping_lines` reads them)."""
    from workbench.scenarios.userconfig import parse_config

    rows, steps = [], {}
    for label, doc in points:
        config = parse_config(doc, where, base_dir)
        arena = arena_for_config(config)
        if keep is not None:
            keep.append(arena.table().assign(**label))
        long = arena.table().set_index(["scheme", "phase"])
        decode = {e.scheme: e for e in arena.entries if e.phase == "decode"}
        for r in arena.wide().itertuples():
            per_token = getattr(r, "time_per_token_s", math.nan)
            rows.append({**label, "scheme": r.scheme, "paper": r.paper, "ttft_s": getattr(r, "ttft_s", math.nan),
                         "time_per_token_s": per_token, "tokens_per_s": tokens_per_s(per_token),
                         "prefill_status": r.prefill_status, "decode_status": r.decode_status,
                         "time_per_token_breakdown": _detail(long, r.scheme),
                         **speculation_columns(config, doc, decode.get(r.scheme), steps)})
    return pd.DataFrame(rows)


# a sweep row's speculation columns (a deployment with a [speculative] table): time per token with the draft at the
# point's gamma and its speed-up over plain decode, the best gamma in 1..16 and its time and speed-up, the costliest
# part at the point's gamma, and why a column is n/a
SPECULATION_COLUMNS = ("with_draft_s", "speedup", "best_gamma", "best_gamma_s", "best_gamma_speedup",
                       "costliest_part", "speculation_notes")
ACCEPTANCE_KEYS = ("gamma", "alpha", "accepted_lengths")
SWEEP_VALUES = ("scheme", "paper", "ttft_s", "time_per_token_s", "tokens_per_s", "prefill_status",
                "decode_status", "time_per_token_breakdown", *SPECULATION_COLUMNS)


def _deployment_key(doc: dict) -> str:
    """The document without the [speculative] acceptance and gamma: points that share it share their verify steps."""
    import json

    rest = {**doc, "speculative": {k: v for k, v in doc.get("speculative", {}).items() if k not in ACCEPTANCE_KEYS}}
    return json.dumps(rest, sort_keys=True, default=str)


def speculation_columns(config, doc: dict, entry, steps: dict) -> dict:
    """A sweep row's SPECULATION_COLUMNS ({} without a [speculative] table): each verify step costed once per
    (deployment, scheme, gamma) in `steps`, so a sweep of speculative.gamma x alpha prices each step once and
    applies each point's acceptance to it; n/a columns say why in speculation_notes."""
    from workbench.scenarios.speculative import MAX_GAMMA, expected_tokens, per_token, verify_step
    from workbench.schemes.base import load_all

    spec = config.speculation
    if spec is None:
        return {}
    out = {**dict.fromkeys(SPECULATION_COLUMNS, math.nan), "costliest_part": "", "speculation_notes": ""}
    if entry is None or entry.status != "ok":
        return {**out, "speculation_notes": "plain decode does not run within memory" if entry else "n/a"}
    key, workload, registry = _deployment_key(doc), config.workload("decode"), None
    costs = {}
    try:
        for g in sorted({*range(1, MAX_GAMMA + 1), spec.gamma}):
            if (key, entry.scheme, g) not in steps:
                registry = registry or load_all()
                steps[(key, entry.scheme, g)] = verify_step(replace(spec, gamma=g), entry.scheme, registry, config.model,
                                                            config.cluster, workload, entry.result)
            costs[g] = per_token(steps[(key, entry.scheme, g)], replace(spec, gamma=g), config.cluster,
                                 expected_tokens(g, spec.alpha, spec.accepted_lengths))
    except WorkbenchError as exc:
        return {**out, "speculation_notes": str(exc).splitlines()[0]}
    here = costs[spec.gamma]
    best = min((c for g, c in costs.items() if g <= MAX_GAMMA), key=lambda c: (c.per_token_s, c.gamma))
    notes = f"expert streaming n/a: {here.experts_note}" if here.experts_note else ""
    return {"with_draft_s": here.per_token_s, "speedup": here.speedup, "best_gamma": best.gamma,
            "best_gamma_s": best.per_token_s, "best_gamma_speedup": best.speedup, "costliest_part": here.losing_part,
            "speculation_notes": notes}


def best_per_point(frame: pd.DataFrame) -> pd.DataFrame:
    """Per sweep point (e.g. per device count): the fastest prefill and decode scheme that runs within memory."""
    keys = [c for c in frame.columns if c not in SWEEP_VALUES]
    rows = []
    for point, group in frame.groupby(keys, sort=False) if keys else [((), frame)]:
        point = point if isinstance(point, tuple) else (point,)
        table = pd.concat([
            group.assign(phase="prefill", latency_s=group["ttft_s"], status=group["prefill_status"]),
            group.assign(phase="decode", latency_s=group["time_per_token_s"], status=group["decode_status"])])
        best = best_schemes(table)
        row = dict(zip(keys, point))
        for phase, column, shown in (("prefill", "ttft_s", "TTFT"), ("decode", "time_per_token_s", "time/token")):
            scheme = best.get(phase)
            seconds = group.set_index("scheme")[column].get(scheme, math.nan) if scheme else math.nan
            row[f"best {phase}"] = f"{scheme} ({shown} {format_seconds(seconds)})" if scheme else "none fits"
        decode = best.get("decode")
        row["tokens/s"] = f"{tokens_per_s(group.set_index('scheme')['time_per_token_s'][decode]):.3g}" \
            if decode else "n/a"
        rows.append(row)
    return pd.DataFrame(rows)


def _run_sweep(args: argparse.Namespace, points: list[tuple[dict, dict]], path: Path, start: float) -> int:
    """Several values of --devices / --set: the sweep table and the best scheme per point on stdout, sweep.csv
    into the output folder (none with --no-charts and no --out)."""
    from workbench.core.io import write_csv_atomic

    tables: list[pd.DataFrame] = []
    frame = sweep_table(points, path.name, path.parent, keep=tables)
    keys = [c for c in frame.columns if c not in SWEEP_VALUES]
    print(sweep_text(frame, keys))
    for head, lines in (("n/a", na_lines(frame, keys)), ("speculation n/a", speculation_na_lines(frame, keys))):
        if lines:
            print(f"\n{head} (each scheme's reason once, with the sweep points it applies to):\n" + "\n".join(lines))
    by = "device count" if keys == ["devices"] else ", ".join(keys)
    print(f"\nbest per {by}:\n{best_per_point(frame).to_string(index=False)}")
    if "devices" in keys:
        print("\n" + "\n".join(stop_helping_lines(pd.concat(tables, ignore_index=True), keys)))
    moe_lines = moe_device_lines(frame, points, path)
    if moe_lines:
        print("\nmixture of experts, where more devices stop helping and why:\n" + "\n".join(moe_lines))
    out = output_folder(args, path)
    if out is not None:
        write_csv_atomic(out / "sweep.csv", frame)
        print(f"\nsweep table in {out / 'sweep.csv'}")
    print(f"({time.perf_counter() - start:.2f} s)")
    return 0


def sweep_text(frame: pd.DataFrame, keys: list[str]) -> str:
    """The sweep rows of the schemes that run in some phase (OOM marked) as text, with the speculation columns
    when the deployment has a [speculative] table; rows n/a in both phases are left to `na_lines`."""
    ran = frame[(frame.prefill_status != "n/a") | (frame.decode_status != "n/a")]
    shown = ran.assign(ttft=ran.ttft_s.map(format_seconds), per_token=ran.time_per_token_s.map(format_seconds),
                       tokens_s=[_rate(t, s) for t, s in zip(ran.time_per_token_s, ran.decode_status)])
    columns = {"ttft": "ttft", "per_token": "time/token", "tokens_s": "tokens/s", "decode_status": "decode_status"}
    if "with_draft_s" in ran:
        shown = shown.assign(with_draft=ran.with_draft_s.map(format_seconds),
                             spec_speedup=[f"{v:.2f}x" if v == v else "n/a" for v in ran.speedup],
                             best=[f"{g:.0f} ({format_seconds(t)})" if g == g else "n/a"
                                   for g, t in zip(ran.best_gamma, ran.best_gamma_s)])
        columns.update({"with_draft": "with draft", "spec_speedup": "speed-up", "best": "best gamma",
                        "costliest_part": "costliest part"})
    columns["time_per_token_breakdown"] = "time_per_token_breakdown"
    return shown[keys + ["scheme", *columns]].rename(columns=columns).to_string(index=False)


def na_lines(frame: pd.DataFrame, keys: list[str]) -> list[str]:
    """One line per scheme and n/a reason of the rows n/a in both phases, naming the sweep points it applies to
    ('megatron_tp (devices 1, 2, 4, 8) n/a: ...'), instead of one row per point."""
    na = frame[(frame.prefill_status == "n/a") & (frame.decode_status == "n/a")]
    return grouped_lines(na, keys, "time_per_token_breakdown", len(frame[keys].drop_duplicates()))


def speculation_na_lines(frame: pd.DataFrame, keys: list[str]) -> list[str]:
    """Per scheme, each reason a speculation column is n/a, once, with the sweep points it applies to."""
    if "speculation_notes" not in frame:
        return []
    ran = frame[(frame.decode_status != "n/a") & (frame.speculation_notes.fillna("") != "")]
    return grouped_lines(ran, keys, "speculation_notes", len(frame[keys].drop_duplicates()))


def grouped_lines(rows: pd.DataFrame, keys: list[str], column: str, points: int) -> list[str]:
    """'scheme (devices 1, 2) <column's text>': one line per scheme and distinct text, with its sweep points (of
    `points` in all; several swept keys: 'every point' where it holds at all of them)."""
    lines = []
    for (scheme, reason), group in rows.groupby(["scheme", column], sort=True):
        if len(keys) == 1:
            where = f"{keys[0]} {', '.join(str(v) for v in group[keys[0]])}"
        elif len(group[keys].drop_duplicates()) == points:
            where = f"every point of {' x '.join(keys)}"
        else:
            where = "; ".join(", ".join(f"{k}={v}" for k, v in zip(keys, values))
                              for values in group[keys].itertuples(index=False))
        lines.append(f"{scheme} ({where}) {reason or 'n/a'}")
    return lines


def moe_header(config) -> str:
    """'mixture of experts: 128 experts per layer, 8 routed per token; 3.35 B of 30.53 B parameters per token
    (routing uniform)': what a MoE deployment stores and computes, and the routing its rows assume."""
    m = config.model
    routing = config.routing
    extra = {k: v for k, v in vars(routing).items() if k != "kind" and v not in ("", 0, 0.0)} if routing else {}
    shown = ", ".join([routing.kind if routing else "uniform"] + [f"{k} {v}" for k, v in extra.items()])
    return (f"mixture of experts: {m.n_experts} experts per layer, {m.n_active_experts} routed per token"
            + (f" + {m.n_shared_experts} shared" if m.n_shared_experts else "")
            + f"; {m.active_params() / 1e9:.2f} B of {m.total_params() / 1e9:.2f} B parameters per token "
            f"(routing: {shown})")


def moe_device_lines(frame: pd.DataFrame, points: list[tuple[dict, dict]], path: Path) -> list[str]:
    """For a `--devices` sweep of a mixture of experts: the model's MoE facts (`moe_advice.moe_summary` at the
    largest count) and, per MoE-capable scheme, its fastest decode count and its partition's reason why more
    devices stop helping there (`moe_advice.scheme_notes`); [] for a dense model or a sweep of no device count."""
    from workbench.scenarios.moe_advice import MoeNumbers, moe_summary, scheme_notes
    from workbench.scenarios.userconfig import parse_config

    if "devices" not in frame.columns:
        return []
    largest = max(points, key=lambda point: point[0]["devices"])
    config = parse_config(largest[1], path.name, path.parent)
    if not config.model.is_moe:
        return []
    numbers = MoeNumbers(config.model, config.weight_bits, config.cluster.n, config.activation_bits,
                         min(d.memory_bytes for d in config.cluster.devices))
    best = {}
    for scheme, rows in frame.groupby("scheme", sort=False):
        ran = rows[rows["decode_status"] == "ok"].sort_values("devices")
        if ran.empty:
            continue
        count = int(ran.loc[ran["time_per_token_s"].idxmin(), "devices"])
        later = rows[rows["devices"] > count].sort_values("devices")
        tried = later[later["decode_status"] != "n/a"]
        unsplit = later[later["decode_status"] == "n/a"]
        best[scheme] = ((count, None, "") if tried.empty else
                        (count, int(tried.iloc[0]["devices"]), str(tried.iloc[0]["decode_status"])))
        if not unsplit.empty:
            best[scheme] += (int(unsplit.iloc[0]["devices"]), str(unsplit.iloc[0]["time_per_token_breakdown"]))
    return moe_summary(numbers) + scheme_notes(numbers, best)


# ---- --devices: will more boards help? ------------------------------------------------------------
def not_applying_lines(answers) -> list[str]:
    """One line per reason for the schemes that apply at no device count (a dense-only scheme on a mixture of
    experts ...): their names, and the reason with each name in it replaced by "<scheme>"."""
    by_reason: dict[str, list[str]] = {}
    for a in answers:
        by_reason.setdefault(a.unsplittable[0][1].replace(a.scheme, "<scheme>"), []).append(a.scheme)
    return [f"  does not apply at any count ({len(names)}): {', '.join(names)}: {reason}"
            for reason, names in by_reason.items()]


def stop_helping_lines(tables: pd.DataFrame, keys: list[str], phase: str = "decode") -> list[str]:
    """Per scheme (and per value of any other swept key), the device count where its `phase` latency stops
    falling and the component that grows past it, or the counts it cannot split the model at
    (`workbench.scenarios.scaling.stop_helping`)."""
    from workbench.scenarios.scaling import stop_helping_all

    rows = tables[tables["phase"] == phase]
    others = [k for k in keys if k != "devices"]
    lines = []
    for point, group in rows.groupby(others, sort=False) if others else [((), rows)]:
        point = point if isinstance(point, tuple) else (point,)
        where = ", ".join(f"{k}={v}" for k, v in zip(others, point))
        lines.append(f"will more devices help ({phase}{', ' + where if where else ''})?")
        answers = stop_helping_all(group)
        lines += ["  " + answer.line() for answer in answers if answer.applies]
        lines += not_applying_lines([a for a in answers if not a.applies])
    return lines


def _writable_dir(out: Path) -> Path:
    """`out` as a folder to write into (`workbench.core.io.writable_folder`, errors naming --out)."""
    return writable_folder(out, f"--out {str(out)!r}")


def output_folder(args: argparse.Namespace, path: Path) -> Path | None:
    """Where files go: --out; else figures/whatif/<stem>/, except with --no-charts (then nothing: None)."""
    if args.out:
        return _writable_dir(Path(args.out))
    if args.no_charts:
        return None
    return _writable_dir(FIGURES_DIR / "whatif" / path.stem)


def speculation_rows(arena: Arena, config) -> pd.DataFrame:
    """Decode per scheme without and with the [speculative] table's draft at its gamma: the schemes whose decode
    runs within memory in `speculative.scheme_table` (time per token, speed-up, the part that costs most; n/a with
    the reason where it cannot), without the best gamma's columns."""
    from workbench.scenarios.speculative import scheme_table
    from workbench.schemes.base import load_all

    plains = [(e.scheme, e.result) for e in arena.entries if e.phase == "decode" and e.status == "ok"]
    return scheme_table(config.speculation, plains, load_all(), config.model, config.cluster,
                        config.workload("decode"), best=False)


def best_gamma_line(arena: Arena, config, rows: pd.DataFrame) -> str:
    """The fastest scheme with speculation, at its best gamma in 1..16 (`speculative.best_gamma`), against the
    fastest plain decode."""
    from workbench.scenarios.speculative import best_gamma
    from workbench.schemes.base import load_all

    ran = rows.dropna(subset=["speculative_s"]) if "speculative_s" in rows else rows.iloc[0:0]
    if ran.empty:
        return "best with speculation: no scheme can verify several tokens"
    scheme = ran.sort_values(["speculative_s", "scheme"]).iloc[0].scheme
    plain = next(e.result for e in arena.entries if e.phase == "decode" and e.scheme == scheme)
    best = best_gamma(config.speculation, scheme, load_all(), config.model, config.cluster,
                      config.workload("decode"), plain=plain)
    fastest_plain = float(rows.plain_s.min())
    return (f"best with speculation: {scheme} at gamma {best.gamma} ({format_seconds(best.per_token_s)}/token, "
            f"{best.tokens_per_step:.2f} tokens per verify step), {fastest_plain / best.per_token_s:.2f}x the fastest "
            f"plain decode ({format_seconds(fastest_plain)}/token)")


def speculation_text(arena: Arena, config) -> str:
    """The rows of `speculation_rows` as text, headed by the draft, placement, gamma and acceptance, and the
    best gamma of the fastest scheme."""
    spec = config.speculation
    accept = f"alpha {spec.alpha:g}" if spec.alpha is not None else f"accepted lengths {list(spec.accepted_lengths)}"
    head = f"speculative decoding: draft {spec.draft} ({spec.placement}), gamma {spec.gamma}, {accept}"
    frame = speculation_rows(arena, config)
    if frame.empty:
        return f"{head}\nno scheme's decode runs within memory"

    def line(r) -> dict:
        if r.notes:
            return {"scheme": r.scheme, "time/token": format_seconds(r.plain_s), "with draft": "n/a", "speed-up": "",
                    "costliest part": r.notes}
        return {"scheme": r.scheme, "time/token": format_seconds(r.plain_s),
                "with draft": format_seconds(r.speculative_s), "speed-up": f"{r.speedup:.2f}x",
                "costliest part": r.costliest}
    frame = frame.fillna({"notes": "", "why": "", "experts_note": ""})
    table = pd.DataFrame([line(r) for r in frame.itertuples()]).to_string(index=False)
    return f"{head}\n{table}\n{best_gamma_line(arena, config, frame)}" + "".join(f"\n{line}" for line in why_lines(frame))


def why_lines(frame: pd.DataFrame) -> list[str]:
    """Why each losing scheme loses (`speculative.losing_reason`: its costliest part from the breakdown's numbers),
    and for a scheme that wins the n/a of an expert streaming it cannot split out."""
    lines = [f"  {r.scheme}: {r.why}" for r in frame.itertuples() if r.why and (r.speedup < 1 or r.experts_note)]
    head = "why (each losing scheme's costliest part, and an expert streaming a scheme cannot split out):"
    return [head, *lines] if lines else []


def model_file_lines(doc: dict, path: Path) -> list[str]:
    """One line on the [model] file, when the deployment names one: its kind, architecture and tensor formats."""
    from workbench.model.modelfile import expand_file

    found = expand_file(path.name, doc.get("model"), path.parent)[1]
    return [found.summary()] if found is not None else []


def _run_single(args: argparse.Namespace, doc: dict, path: Path, start: float) -> int:
    """One deployment: the arena table and the best schemes on stdout, the CSVs and charts into the output folder."""
    from workbench.scenarios.userconfig import parse_config

    config = parse_config(doc, path.name, path.parent)
    arena = arena_for_config(config).check_feasible()
    link = config.cluster.topology.link
    print(f"{config.name}\nmodel {config.model.name} at {config.weight_bits:g} bit "
          f"({config.model.weight_bytes(config.weight_bits) / GIB:.2f} GiB), prompt {config.seq_len} tokens, "
          f"decode attends {config.kv_len}; {cluster_label(config.cluster)}; {config.cluster.topology.kind}, "
          f"{bytes_per_s_to_mbps(link.bandwidth_bytes_per_s):g} Mbps, {link.latency_s * 1e3:g} ms per hop\n")
    if config.model.is_moe:
        print(moe_header(config) + "\n")
    for line in [*model_file_lines(doc, path), *efficiency_notices(config.cluster.devices),
                 *budget_notices(config.cluster.devices), *undescribed_notices(config.cluster.devices)]:
        print(line)
    print(format_table(arena))
    print(f"\n{best_line(arena)}")
    if config.speculation is not None:
        print(f"\n{speculation_text(arena, config)}")
    out = output_folder(args, path)
    if out is not None:
        from workbench.scenarios.arena_charts import write_figures, write_tables

        if args.no_charts:
            write_tables(arena, out)
        else:
            write_figures(arena, out, png=args.png)
        print(f"\n{'tables' if args.no_charts else 'charts and tables'} in {out}")
    print(f"({time.perf_counter() - start:.2f} s)")
    return 0


def main(args: argparse.Namespace) -> int:
    """Load the TOML deployment; one value per option: the arena table and charts, several: a sweep; 0 on success."""
    start = time.perf_counter()
    path = Path(args.config)
    table = read_document(path)
    devices = parse_values("--devices", args.devices) if args.devices else None
    sets = [parse_set(text) for text in args.set]
    points = [(label, set_lengths(doc, args.seq_len, args.kv_len, path.name, path.parent))
              for label, doc in sweep_points(table, devices, sets)]
    if len(points) == 1:
        return _run_single(args, points[0][1], path, start)
    return _run_sweep(args, points, path, start)
