"""llama-bench output as calibrate rows (`workbench.scenarios.llamabench`): the pasted table, -o json and -o jsonl parse to
the same rows; malformed input is one line naming the file and line; `calibrate` fits on a llama-bench table.

The t/s figures of the tables below are parser inputs (the first table is the example of a pasted
`llama-bench` run this feature was asked for), not measurements the workbench relies on."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from workbench.core.errors import WorkbenchError
from workbench.core.io import REPO_ROOT
from workbench.scenarios import calibrate as C
from workbench.scenarios import llamabench as L
from workbench.scenarios.userconfig import parse_config, read_document

EXAMPLE = REPO_ROOT / "examples" / "sbc_gigabit.toml"

PASTED = """\
| model                          |       size |     params | backend    | threads |            test |                  t/s |
| ------------------------------ | ---------: | ---------: | ---------- | ------: | --------------: | -------------------: |
| llama 8B Q4_0                  |   4.33 GiB |     8.03 B | CPU        |       4 |           pp512 |         20.41 ± 0.05 |
| llama 8B Q4_0                  |   4.33 GiB |     8.03 B | CPU        |       4 |           tg128 |          5.06 ± 0.01 |

build: 8e672efe (4440)
"""

# A newer llama-bench's table on a GPU backend: ngl, n_ubatch, type_k, fa, mmap columns, a depth test, and the
# backend's log lines before it (llama-bench.cpp markdown_printer at ggml-org/llama.cpp 050fc7f3).
NEWER = """\
ggml_cuda_init: found 1 CUDA devices:
  Device 0: NVIDIA GeForce RTX 4090, compute capability 8.9, VMM: yes
| model                          |       size |     params | backend    | ngl | n_ubatch | type_k | fa | mmap |            test |                  t/s |
| ------------------------------ | ---------: | ---------: | ---------- | --: | -------: | -----: | -: | ---: | --------------: | -------------------: |
| qwen3 8B Q4_K - Medium         |   4.68 GiB |     8.19 B | CUDA       |  99 |      256 |   q8_0 |  1 |    0 |           pp512 |     10231.77 ± 55.20 |
| qwen3 8B Q4_K - Medium         |   4.68 GiB |     8.19 B | CUDA       |  99 |      256 |   q8_0 |  1 |    0 |           tg128 |        128.43 ± 0.31 |
| qwen3 8B Q4_K - Medium         |   4.68 GiB |     8.19 B | CUDA       |  99 |      256 |   q8_0 |  1 |    0 |   tg128 @ d4096 |        119.05 ± 0.12 |

build: 050fc7f3 (6543)
"""

# test::get_fields of llama-bench.cpp (ggml-org/llama.cpp 050fc7f3), the values of the pasted table's runs.
FIELDS = {"build_commit": "8e672efe", "build_number": 4440, "cpu_info": "ARM", "gpu_info": "", "backends": "CPU",
          "model_filename": "models/llama-8b-q4_0.gguf", "model_type": "llama 8B Q4_0", "model_size": 4649320448,
          "model_n_params": 8030261248, "n_batch": 2048, "n_ubatch": 512, "n_threads": 4, "cpu_mask": "0x0",
          "cpu_strict": False, "poll": 50, "type_k": "f16", "type_v": "f16", "n_gpu_layers": 99, "n_cpu_moe": 0,
          "split_mode": "layer", "main_gpu": 0, "no_kv_offload": False, "flash_attn": False, "devices": "auto",
          "tensor_split": "0.00", "tensor_buft_overrides": "none", "use_mmap": True, "embeddings": False,
          "no_op_offload": 0, "no_host": False, "n_prompt": 0, "n_gen": 0, "n_depth": 0,
          "test_time": "2025-01-09T10:00:00Z", "avg_ns": 0, "stddev_ns": 0, "avg_ts": 0.0, "stddev_ts": 0.0}
RUNS = [dict(FIELDS, n_prompt=512, avg_ts=20.41, stddev_ts=0.05, avg_ns=25085742000),
        dict(FIELDS, n_gen=128, avg_ts=5.06, stddev_ts=0.01, avg_ns=25296442000)]


def json_text(objects: list[dict]) -> str:
    """`llama-bench -o json` as json_printer writes it: one field a line, each object between '  {' and '  }'."""
    blocks = ["  {\n" + ",\n".join(f"    {json.dumps(k)}: {json.dumps(v)}" for k, v in o.items()) + "\n  }"
              for o in objects]
    return "[\n" + ",\n".join(blocks) + "\n]\n"


def jsonl_text(objects: list[dict]) -> str:
    """`llama-bench -o jsonl`: one object a line."""
    return "".join(json.dumps(o) + "\n" for o in objects)


def _write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return path


# ---- parsing -------------------------------------------------------------------------------------------------
def test_a_pasted_table_becomes_a_prefill_and_a_decode_row(tmp_path):
    rows = C.read_measurements(_write(tmp_path, "bench.md", PASTED))
    assert list(rows.phase) == ["prefill", "decode"] and list(rows.line) == [3, 4]
    assert list(rows.tokens) == [512, 64]  # tg128 from an empty context: mean attended length floor(129 / 2)
    assert rows.latency_s.iloc[0] == pytest.approx(512 / 20.41, rel=1e-12)  # the whole prompt's time
    assert rows.latency_s.iloc[1] == pytest.approx(1 / 5.06, rel=1e-12)  # one token's
    assert set(rows.scheme) == {L.SCHEME} and set(rows.devices) == {1} and set(rows.role) == {"calibration"}
    assert set(rows.llama_threads) == {4} and set(rows.llama_build) == {"8e672efe (4440)"}
    assert set(rows.llama_model) == {"llama 8B Q4_0"} and "model" not in rows.columns  # the config's model
    assert rows.llama_size_bytes.iloc[0] == pytest.approx(4.33 * 1024 ** 3, rel=1e-12)
    assert rows.llama_params.iloc[0] == pytest.approx(8.03e9, rel=1e-12)


def test_a_newer_table_is_read_by_its_header_names_past_the_log_lines(tmp_path):
    runs = L.read_runs(tmp_path / "run.txt", NEWER)
    assert [r.test for r in runs] == ["pp512", "tg128", "tg128 @ d4096"] and [r.line for r in runs] == [5, 6, 7]
    assert [r.tokens for r in runs] == [512, 64, 4096 + 64]
    assert [r.tokens_per_s for r in runs] == pytest.approx([10231.77, 128.43, 119.05], rel=1e-12)
    assert [r.stddev_ts for r in runs] == pytest.approx([55.20, 0.31, 0.12], rel=1e-12)
    assert {(r.backend, r.threads, r.build, r.model_type) for r in runs} == {
        ("CUDA", None, "050fc7f3 (6543)", "qwen3 8B Q4_K - Medium")}


# The Markdown example of llama-bench's README (ggml-org/llama.cpp tools/llama-bench/README.md, 08d0baac): a
# 2023 build's table, whose tests read "pp 512" and "tg 128".
OLD = """\
| model                          |       size |     params | backend    | ngl | test       |              t/s |
| ------------------------------ | ---------: | ---------: | ---------- | --: | ---------- | ---------------: |
| llama 7B mostly Q4_0           |   3.56 GiB |     6.74 B | CUDA       |  -1 | pp 512     |  2368.80 ± 93.24 |
| llama 7B mostly Q4_0           |   3.56 GiB |     6.74 B | CUDA       |  -1 | tg 128     |    131.42 ± 0.59 |
"""


def test_a_2023_table_with_spaced_test_names_is_read(tmp_path):
    rows = C.read_measurements(_write(tmp_path, "old.md", OLD), validation=("tg 128",))
    assert list(rows.llama_test) == ["pp512", "tg128"] and list(rows.tokens) == [512, 64]
    assert list(rows.role) == ["calibration", "validation"] and set(rows.llama_build) == {""}
    assert list(rows.latency_s) == pytest.approx([512 / 2368.80, 1 / 131.42], rel=1e-12)


def test_two_pasted_tables_keep_each_its_own_build(tmp_path):
    runs = L.read_runs(tmp_path / "two.md", OLD + "\n" + PASTED)
    assert [(r.line, r.test, r.build) for r in runs] == [(3, "pp512", ""), (4, "tg128", ""),
                                                         (8, "pp512", "8e672efe (4440)"),
                                                         (9, "tg128", "8e672efe (4440)")]


def test_json_and_jsonl_give_the_rows_the_table_gives(tmp_path):
    table = C.read_measurements(_write(tmp_path, "bench.md", PASTED))
    for name, text in (("bench.json", json_text(RUNS)), ("bench.jsonl", jsonl_text(RUNS)),
                       ("bench.out", json_text(RUNS)), ("stream.log", jsonl_text(RUNS))):
        rows = C.read_measurements(_write(tmp_path, name, text))
        for key in ("phase", "tokens", "scheme", "devices", "role", "llama_test", "llama_threads", "llama_build"):
            assert list(rows[key]) == list(table[key]), (name, key)
        assert list(rows.latency_s) == pytest.approx(list(table.latency_s), rel=1e-12), name
        # the table rounds size and parameters to 3 digits: 0.5 % covers that
        assert list(rows.llama_size_bytes) == pytest.approx(list(table.llama_size_bytes), rel=5e-3)
    json_lines = C.read_measurements(tmp_path / "bench.json").line
    assert list(json_lines) == [2, 2 + len(FIELDS) + 2]  # the line each object opens on ('  {')
    assert list(C.read_measurements(tmp_path / "bench.jsonl").line) == [1, 2]


def test_an_old_json_object_without_n_depth_or_model_facts_is_read(tmp_path):
    lean = {"n_prompt": 0, "n_gen": 16, "avg_ts": 8.0}
    (run,) = L.parse_json("old.jsonl", json.dumps(lean))
    assert (run.phase, run.tokens, run.n_depth, run.model_params) == ("decode", 8, 0, None)
    assert run.latency_s == pytest.approx(0.125, rel=1e-12)


@pytest.mark.parametrize("n_gen,n_depth,tokens", [(1, 0, 1), (5, 0, 3), (128, 0, 64), (127, 0, 64), (128, 512, 576)])
def test_a_decode_row_attends_the_mean_position_rounded_down(n_gen, n_depth, tokens):
    """Token i of tgN attends n_depth + i + 1 positions: the mean is n_depth + (N + 1) / 2, rounded down."""
    run = L.Run("b.md", 3, 0, n_gen, 4.0, n_depth=n_depth)
    assert run.tokens == tokens and run.latency_s == pytest.approx(0.25, rel=1e-12) and run.phase == "decode"


@pytest.mark.parametrize("name,text,kind", [
    ("a.json", "", "json"), ("a.jsonl", "{}", "json"), ("a.csv", "  [\n", "json"), ("a.csv", "\n{", "json"),
    ("a.md", "x", "markdown"), ("a.txt", "scheme,devices", "markdown"), ("a.out", "\n\n  | model |", "markdown"),
    ("a.csv", "scheme,devices,phase", None), ("measured", "scheme", None)])
def test_the_reader_is_chosen_by_suffix_or_first_character(tmp_path, name, text, kind):
    assert L.detect(tmp_path / name, text) == kind


def test_validation_marks_the_named_tests(tmp_path):
    rows = C.read_measurements(_write(tmp_path, "bench.md", PASTED), validation=("pp512",))
    assert list(rows.role) == ["validation", "calibration"]
    assert L.parse_validation(" tg128 , tg128 @ d512,") == ("tg128", "tg128 @ d512") and L.parse_validation(None) == ()


@pytest.mark.parametrize("kwargs,match", [
    (dict(line=0), "line must be >= 1"),
    (dict(n_prompt=8, n_gen=8), "test pp8\\+tg8 is a combined prompt \\+ generation test"),
    (dict(n_prompt=0, n_gen=0), "needs n_prompt > 0 or n_gen > 0"),
    (dict(n_prompt=8, n_depth=4), "test pp8 @ d4 is a prompt after a 4-token context"),
    (dict(n_prompt=8, tokens_per_s=float("nan")), "t/s must be a finite number > 0"),
    (dict(n_prompt=8, tokens_per_s=0.0), "t/s must be a finite number > 0"),
    (dict(n_prompt=8, model_params=-1.0), "model_params must be a finite number > 0"),
    (dict(n_prompt=-1, n_gen=8), "must be >= 0"),
])
def test_a_run_checks_its_invariants(kwargs, match):
    base = dict(source="b.md", line=3, n_prompt=0, n_gen=0, tokens_per_s=1.0)
    with pytest.raises(WorkbenchError, match=match) as bad:
        L.Run(**{**base, **kwargs})
    assert "\n" not in str(bad.value)


# ---- malformed input: one line naming the file and the line ------------------------------------------------------
def _pasted(line: int, new: str) -> str:
    lines = PASTED.splitlines()
    lines[line - 1] = new
    return "\n".join(lines) + "\n"


ROW3 = PASTED.splitlines()[2]
MALFORMED = [
    ("bench.md", _pasted(4, "| llama 8B Q4_0 | 4.33 GiB | 8.03 B | CPU | 4 | tg128 |"),
     "bench.md line 4: 6 cells, the header has 7 (model, size, params, backend, threads, test, t/s)"),
    ("bench.md", _pasted(3, ROW3.replace("20.41 ± 0.05", "fast ± slow ")),
     "bench.md line 3: t/s must be a number of tokens per second, optionally '± stddev' (20.41 ± 0.05), got "
     "'fast ± slow'"),
    ("bench.md", _pasted(4, ROW3.replace("      pp512", "pp512+tg128")),
     "bench.md line 4: test pp512+tg128 is a combined prompt + generation test (-pg); calibrate takes ppN and tgN "
     "tests only: delete the row or rerun without -pg"),
    ("bench.md", _pasted(3, ROW3.replace("  pp512", "warmup")),
     "bench.md line 3: test must be ppN or tgN (optionally ' @ dN'), got 'warmup'"),
    ("bench.md", _pasted(3, ROW3.replace("      pp512", "pp512 @ d64")),
     "bench.md line 3: test pp512 @ d64 is a prompt after a 64-token context; a calibrate prefill row is a prompt "
     "from an empty context (ppN): delete the row or rerun with -d 0"),
    ("bench.md", _pasted(3, ROW3.replace("4.33 GiB", " 4.33 GB")),
     "bench.md line 3: size must be a number and one of KiB, MiB, GiB, TiB (e.g. '4.33 GiB'), got '4.33 GB'"),
    ("bench.md", _pasted(3, ROW3.replace("|       4 |", "|   four |")),
     "bench.md line 3: threads must be an integer >= 0, got 'four'"),
    ("bench.md", _pasted(1, PASTED.splitlines()[0].replace("t/s", "tps")),
     "bench.md line 1: the table header lacks column 't/s'; a llama-bench table has test and t/s columns, got "
     "model, size, params, backend, threads, test, tps"),
    ("bench.md", _pasted(2, ROW3), "bench.md line 2: the line under a table header is its |---|---:| separator"),
    ("bench.md", _pasted(4, ROW3.rstrip("| ")), "bench.md line 4: a table row starts and ends with |, got"),
    ("bench.md", "no table here\n", "bench.md: no llama-bench tests in it"),
    ("bench.json", json_text([RUNS[0], {k: v for k, v in RUNS[1].items() if k != "avg_ts"}]),
     f"bench.json line {2 + len(FIELDS) + 2}: the llama-bench object lacks avg_ts; needed: n_prompt, n_gen, avg_ts "
     "(llama-bench -o json or -o jsonl)"),
    ("bench.jsonl", jsonl_text([RUNS[0], {k: v for k, v in RUNS[1].items() if k not in ("n_prompt", "n_gen")}]),
     "bench.jsonl line 2: the llama-bench object lacks n_prompt, n_gen; needed"),
    ("bench.jsonl", jsonl_text(RUNS) + '{"n_prompt": 512,\n', "bench.jsonl line 3: not valid JSON: Expecting property "
     "name enclosed in double quotes (at line 4 column 1)"),
    ("bench.jsonl", jsonl_text([dict(RUNS[0], n_prompt=512.5)]), "bench.jsonl line 1: n_prompt must be an integer"),
    ("bench.jsonl", jsonl_text([dict(RUNS[0], avg_ts="20.41")]), "bench.jsonl line 1: avg_ts must be a finite number"),
    ("bench.jsonl", "[1, 2]\n", "bench.jsonl line 1: a llama-bench test is a JSON object, got int"),
    ("bench.json", json_text(RUNS)[:-3], f"bench.json line {2 * len(FIELDS) + 5}: not valid JSON: the list is not "
                                         "closed with ]"),
    ("bench.json", "[]\n", "bench.json: no llama-bench tests in it"),
    ("bench.jsonl", jsonl_text([RUNS[0], dict(RUNS[1], model_type="llama 8B Q8_0", model_size=8541000000)]),
     "bench.jsonl: the rows are costed as the config's one model, but the file holds 2 models ('llama 8B Q4_0', "
     "'llama 8B Q8_0': type, size or parameters differ): keep one model's rows"),
]


@pytest.mark.parametrize("name,text,message", MALFORMED, ids=[m[2][:48] for m in MALFORMED])
def test_malformed_llama_bench_output_is_one_line_naming_the_line(tmp_path, name, text, message):
    with pytest.raises(WorkbenchError) as bad:
        C.read_measurements(_write(tmp_path, name, text))
    assert str(bad.value).startswith(message) and "\n" not in str(bad.value)


def test_validation_names_must_be_tests_of_the_file_and_a_csv_has_its_own_roles(tmp_path):
    with pytest.raises(WorkbenchError, match=r"^--validation 'tg256' is not a test of bench.md; its tests: pp512, "
                                             "tg128$"):
        C.read_measurements(_write(tmp_path, "bench.md", PASTED), validation=("tg256",))
    pd.DataFrame([dict(scheme="local", devices=1, phase="decode", tokens=8, latency_s=0.1, role="calibration")]) \
        .to_csv(tmp_path / "m.csv", index=False)
    with pytest.raises(WorkbenchError, match="--validation names llama-bench tests; m.csv is a CSV"):
        C.read_measurements(tmp_path / "m.csv", validation=("tg128",))


def test_llama_bench_csv_is_pointed_to_the_formats_it_reads(tmp_path):
    pd.DataFrame(RUNS).to_csv(tmp_path / "bench.csv", index=False)
    with pytest.raises(WorkbenchError, match="missing column scheme; .*; a llama-bench -o csv file\\? give its -o json, "
                                             "-o jsonl or markdown table instead$"):
        C.read_measurements(tmp_path / "bench.csv")


# ---- the model check -----------------------------------------------------------------------------------------
def test_a_llama_bench_model_unlike_the_configs_gets_one_warning_line(tmp_path):
    rows = C.read_measurements(_write(tmp_path, "bench.md", PASTED))  # an 8B model
    config = parse_config(read_document(EXAMPLE), "sbc")  # Llama 2-13B in q4_0
    args = (config.model.total_params(), config.model.weight_bytes(config.weight_bits), config.model.name)
    (line,) = L.mismatch_warnings(rows, *args)
    assert line.startswith("warning: llama-bench's model 'llama 8B Q4_0' is not the config's Llama 2-13B: parameters "
                           "8.03e+09 vs 1.3e+10 (-38%), bytes 4.65e+09 vs 7.32e+09 (-36%)") and "\n" not in line
    same = (rows.llama_params.iloc[0] * 1.09, rows.llama_size_bytes.iloc[0] / 1.09, "Close")  # 9 % off: no warning
    assert L.mismatch_warnings(rows, *same) == []
    mixed = rows.assign(llama_threads=[4, 8])
    assert L.mismatch_warnings(mixed, *same) == ["warning: the llama-bench rows ran with 4, 8 threads; the fit "
                                                 "treats them as one device"]
    assert L.mismatch_warnings(rows.drop(columns=[c for c in rows if c.startswith("llama_")]), *args) == []


# ---- end to end ----------------------------------------------------------------------------------------------
def _one_board(tmp_path) -> tuple[dict, object]:
    """The example deployment with a model one of its boards holds (Llama 3.1-8B in q4_0, 4.2 GiB of 7 GiB; the
    example's Llama 2-13B would swap), written to tmp_path: (document, path)."""
    document = read_document(EXAMPLE)
    document["model"]["name"] = "Llama 3.1-8B"
    path = _write(tmp_path, "one_board.toml", C.to_toml(document))
    return document, path


def _table_of(document: dict, memory_efficiency: float) -> tuple[str, float]:
    """A llama-bench table (pp512, tg128) of `document`'s one device at `memory_efficiency`, its t/s printed as
    llama-bench prints them (%.2f), with the config's model's size and parameters; (table, tg128's t/s)."""
    config = parse_config(document, "board")
    probe = L.to_rows([L.Run("probe", 3, 512, 0, 1.0), L.Run("probe", 4, 0, 128, 1.0)])
    seconds = C.predict(C.with_values(document, {"memory_efficiency": memory_efficiency}), probe, "board", None)
    rates = [512 / seconds[0], 1 / seconds[1]]
    size = f"{config.model.weight_bytes(config.weight_bits) / 1024 ** 3:.2f} GiB"
    params = f"{config.model.total_params() / 1e9:.2f} B"
    head = PASTED.splitlines()[:2]
    rows = [f"| llama 8B Q4_0 | {size} | {params} | CPU | 4 | {test} | {rate:.2f} ± 0.01 |"
            for test, rate in zip(("pp512", "tg128"), rates)]
    return "\n".join(head + rows) + "\n\nbuild: 8e672efe (4440)\n", rates[1]


def test_calibrate_fits_on_a_llama_bench_table_and_reports(tmp_path, capsys):
    from workbench.__main__ import main

    document, config = _one_board(tmp_path)
    table, decode_rate = _table_of(document, 0.5)  # the example states 0.67
    path = _write(tmp_path, "bench.md", table)
    out = tmp_path / "fitted.toml"
    code = main(["calibrate", str(config), str(path), "--fit", "memory_efficiency", "--validation", "pp512",
                 "--out", str(out)])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    fitted = read_document(out)["devices"][0]
    # the decode step streams the weights (sensitivity ~ -1), so the fit is as exact as tg128's printed t/s:
    # %.2f rounds by at most 0.005 / t/s relative
    assert decode_rate > 1.0
    assert fitted["memory_efficiency"] == pytest.approx(0.5, rel=0.005 / decode_rate + 1e-4)
    assert "kind = fitted; fitted_on = bench.md calibration rows (lines 4)" in fitted["sources"]["memory_efficiency"]
    assert "validation: median |error|" in printed.out and "warning: llama-bench's model" not in printed.out
    assert " tg128 single_device_resident " in printed.out  # the sensitivity table names the llama-bench test
    rows = pd.read_csv(tmp_path / "fitted.rows.csv")
    assert list(rows.role) == ["validation", "calibration"] and list(rows.llama_test) == ["pp512", "tg128"]
    assert abs(rows.error_after.iloc[1]) < 0.005 / decode_rate + 1e-4  # the calibration row, fitted
    assert abs(rows.error_before.iloc[1]) > 0.2  # 0.67 -> 0.5: the fit moved it


def test_calibrate_on_the_pasted_table_warns_about_the_model_before_fitting(tmp_path, capsys):
    from workbench.__main__ import main

    path = _write(tmp_path, "bench.md", PASTED)
    main(["calibrate", str(EXAMPLE), str(path), "--fit", "efficiency_gemm", "--validation", "tg128",
          "--out", str(tmp_path / "fitted.toml")])
    out = capsys.readouterr().out
    assert out.count("warning: llama-bench's model 'llama 8B Q4_0' is not the config's Llama 2-13B") == 1
    assert out.index("warning: llama-bench's model") < out.index("sensitivity of each calibration row")
