"""distributed-llama run here: the model/tokenizer writer read back per the loaders' layout, the root-log parser on
captured lines, the scheme's bytes against every stored run's logged kB, and one short live run (skipped with the
reason without root, ip/tc or a C++ compiler)."""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
from pathlib import Path

import pytest

from workbench.core.errors import WorkbenchError
from workbench.measure.cluster.netns import LinkShape, list_namespaces, shaping_unavailable
from workbench.measure.engines import dllama, dllama_model
from workbench.measure.engines.runs import read_runs
from workbench.model.models import TransformerConfig

FIXTURES = Path(__file__).parent / "fixtures" / "dllama"
RUNS = Path(__file__).parents[1] / "data" / "engines" / "dllama_runs.csv"
DENSE, MOE = dllama.SHAPES["dense-512x4"], dllama.SHAPES["qwen3moe-512x2"]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("version", dllama_model.VERSIONS)
def test_model_header_reads_back_and_the_file_is_every_tensor(tmp_path, version):
    files = dllama_model.write_files(tmp_path, DENSE, version, seq_len=64, seed=3)
    header = dllama_model.read_header(files.model)
    assert header[2] == 512 and header[3] == 1024 and header[4] == 4 and header[5] == 8 and header[6] == 4
    assert header[9] == 512 and header[10] == 64 and header[11] == 1 and header[1] == 0xABCD00
    assert (13 in header) == (version == "v0.16.4")  # v0.4.0 throws on any key past ROPE_THETA
    d, f, v, kv, L = 512, 1024, 512, 256, 4
    q40 = lambda rows, cols: rows * cols // 32 * 18  # noqa: E731
    layer = q40(d, d) * 2 + q40(kv, d) * 2 + q40(f, d) * 2 + q40(d, f) + 2 * d * 4
    weights = v * d * 4 + L * layer + d * 4 + q40(v, d)
    size = struct.unpack("<i", files.model.read_bytes()[4:8])[0]
    assert files.model.stat().st_size == size + weights == dllama_model.model_file_bytes(DENSE, version)


def test_moe_file_has_the_gate_experts_and_qk_norms_and_only_v016_takes_it(tmp_path):
    files = dllama_model.write_files(tmp_path, MOE, "v0.16.4")
    header = dllama_model.read_header(files.model)
    assert header[1] == 0xABCD02 and header[7] == 4 and header[8] == 2 and header[21] == 256 and header[19] == 64
    names = [t[0] for t in dllama_model.tensor_plan(MOE, "v0.16.4")]
    assert names[1:10] == ["0.q", "0.k", "0.v", "0.wo", "0.moe_gate", "0.0.w1", "0.0.w2", "0.0.w3", "0.1.w1"]
    assert "0.norm_q" in names and "0.norm_k" in names
    with pytest.raises(WorkbenchError, match="needs version v0.16.4"):
        dllama_model.write_files(tmp_path, MOE, "v0.4.0")


def test_writer_is_seeded_and_deterministic(tmp_path):
    a = dllama_model.write_model(tmp_path / "a.m", DENSE, "v0.4.0", seed=1)
    b = dllama_model.write_model(tmp_path / "b.m", DENSE, "v0.4.0", seed=1)
    c = dllama_model.write_model(tmp_path / "c.m", DENSE, "v0.4.0", seed=2)
    assert _sha(a) == _sha(b) != _sha(c)


def _read_tokenizer(path: Path, version: str) -> tuple[dict, list[bytes]]:
    """The tokenizer as the loaders read it (v0.4.0 src/tokenizer.cpp:38-80, v0.16.4 src/tokenizer.cpp:52-135)."""
    data = path.read_bytes()
    if version == "v0.4.0":
        magic, size, longest, bos, eos, pad = struct.unpack("<IIIiii", data[:24])
        head, at = {"magic": magic, "vocab": size, "longest": longest, "bos": bos, "eos": eos}, 24
    else:
        magic, hsize = struct.unpack("<ii", data[:8])
        kv = struct.unpack(f"<{(hsize - 8) // 4}i", data[8:hsize])
        pairs = dict(zip(kv[0::2], kv[1::2], strict=True))
        head, at = {"magic": magic, "version": pairs[0], "vocab": pairs[1], "longest": pairs[2], "bos": pairs[3],
                    "eos": pairs[4]}, hsize
    vocab = []
    for _ in range(head["vocab"]):
        _score, length = struct.unpack("<fi", data[at:at + 8])
        vocab.append(data[at + 8:at + 8 + length])
        at += 8 + length
    assert at == len(data)
    return head, vocab


@pytest.mark.parametrize("version", dllama_model.VERSIONS)
def test_tokenizer_reads_back_with_byte_tokens_where_the_encoder_looks(tmp_path, version):
    files = dllama_model.write_files(tmp_path, DENSE, version)
    head, vocab = _read_tokenizer(files.tokenizer, version)
    assert head["vocab"] == 512 and all(len(t) >= 1 for t in vocab)
    assert len(set(vocab)) == 512 and head["longest"] == max(len(t) for t in vocab)
    if version == "v0.4.0":  # byte fallback at id byte + 3, the dummy prefix " " present, bos 1
        assert head["magic"] == 0x567123 and head["bos"] == 1 and vocab[3 + ord("h")] == b"h" and b" " in vocab
    else:  # every prompt character is a regular token: id below bos
        assert head["magic"] == 0x567124 and head["version"] == 1 and head["bos"] == 510
        assert all(vocab.index(c.encode()) < head["bos"] for c in dllama.PROMPT)


def test_bad_shapes_and_versions_are_one_line_errors():
    odd = TransformerConfig(name="odd", family="llama", n_layers=1, d_model=528, n_heads=8, d_ff=1024,
                            vocab_size=512)
    with pytest.raises(WorkbenchError, match="d_model of 'odd' must be a multiple of 32"):
        dllama_model.check_shape(odd, "v0.16.4")
    with pytest.raises(WorkbenchError, match="version must be one of v0.4.0, v0.16.4"):
        dllama_model.check_version("v0.9.0")
    with pytest.raises(WorkbenchError, match="processes must be a power of two"):
        dllama.run_dllama("v0.16.4", DENSE, processes=3)


def test_v04_log_lines_parse_into_prefill_and_decode():
    lines, summary = dllama.parse_log((FIXTURES / "v0.4.0_root_dense_n2.log").read_text(), "v0.4.0", 13)
    assert summary == {}
    assert lines[0] == dllama.TokenLine("prefill", 2, 642, 644, 2600, 6)  # the first forward carries the load
    assert [t.phase for t in lines].count("prefill") == 12
    assert all((t.sent_kb, t.recv_kb) == (8, 6) for t in lines[1:])


def test_v016_log_lines_parse_with_the_batched_prompt_and_summary():
    lines, summary = dllama.parse_log((FIXTURES / "v0.16.4_root_dense_n2.log").read_text(), "v0.16.4")
    assert lines[0] == dllama.TokenLine("prefill", 3, 58, 61, 68, 57)
    assert all(t.phase == "decode" and (t.sent_kb, t.recv_kb) == (6, 5) for t in lines[1:])
    assert summary["prefill"] == pytest.approx(5.58) and summary["decode"] == pytest.approx(5.40)


@pytest.mark.parametrize("version", dllama_model.VERSIONS)
def test_fixture_rows_hold_the_scheme_to_the_logged_kb(version):
    log = (FIXTURES / f"{version}_root_dense_n2.log").read_text()
    rows = dllama.rows_from_log(log, version, DENSE, 2, LinkShape(10.0), 0.5, "fixture")
    assert [r.phase for r in rows] == ["decode", "prefill"]
    for row in rows:
        assert dllama.logged_kb(row) == dllama.predicted_kb(row)
    assert rows[0].link_bytes_per_token > rows[0].predicted_bytes_per_token  # headers and ACKs on top


def test_every_stored_run_logged_the_schemes_bytes():
    runs = read_runs(RUNS)
    kinds = {(r.engine_version, r.shape, r.phase, r.processes) for r in runs}
    for version, shape in (("v0.4.0", "dense-512x4"), ("v0.16.4", "dense-512x4"), ("v0.16.4", "qwen3moe-512x2")):
        for phase in ("decode", "prefill"):
            assert {(version, shape, phase, 2), (version, shape, phase, 4)} <= kinds
    for row in runs:
        assert row.scheme == dllama.scheme_for(row.engine_version, dllama.row_model(row))
        assert dllama.logged_kb(row) == dllama.predicted_kb(row), (row.engine_version, row.shape, row.phase,
                                                                    row.processes)


def test_the_bytes_check_fails_on_a_wrong_deployment():
    from dataclasses import replace

    row = next(r for r in read_runs(RUNS) if r.engine_version == "v0.16.4" and r.phase == "decode")
    assert dllama.predicted_kb(replace(row, n_layers=row.n_layers + 2)) != dllama.logged_kb(row)


def _live_skip_reason() -> str | None:
    reason = shaping_unavailable()
    if reason:
        return reason
    missing = [tool for tool in ("g++", "make") if shutil.which(tool) is None]
    return f"building distributed-llama needs {' and '.join(missing)}" if missing else None


@pytest.fixture(scope="module")
def v04_binary(tmp_path_factory):
    """v0.4.0 built from its vendored tarball with its own Makefile, once for the live tests."""
    reason = _live_skip_reason()
    if reason:
        pytest.skip(reason)
    binary = dllama.build("v0.4.0", cache=tmp_path_factory.mktemp("engines"), jobs=2)
    assert binary.exists()
    return binary


def test_live_v04_run_over_a_shaped_gigabit_link_logs_the_schemes_bytes_and_cleans_up(tmp_path, v04_binary):
    binary = v04_binary
    log = dllama.run_once("v0.4.0", DENSE, 2, LinkShape(1000.0), 4, tmp_path, binary, timeout_s=60)
    rows = dllama.rows_from_log(log, "v0.4.0", DENSE, 2, LinkShape(1000.0), None, "test")
    assert all(dllama.logged_kb(r) == dllama.predicted_kb(r) for r in rows)
    assert not [n for n in list_namespaces() if n.startswith(f"wb{os.getpid()}-")]
    with pytest.raises(WorkbenchError, match="root exited"):
        dllama.run_once("v0.4.0", DENSE, 2, LinkShape(1000.0), 4, tmp_path, tmp_path / "no-such-binary", 30)
    assert not [n for n in list_namespaces() if n.startswith(f"wb{os.getpid()}-")]


def _engine_pids(binary: Path) -> list[int]:
    """Pids of processes running `binary` (argv[0]: `ip netns exec` execs it in place)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if (proc / "cmdline").read_bytes().split(b"\0")[0] == str(binary).encode():
                    pids.append(int(proc.name))
            except OSError:
                pass
    return pids


def test_ctrl_c_mid_run_kills_the_engine_and_removes_the_namespaces(tmp_path, v04_binary):
    import subprocess
    import sys
    import time

    from sigint import restore_default_sigint

    binary = v04_binary
    script = (f"from pathlib import Path\nfrom workbench.measure.cluster.netns import LinkShape\nfrom workbench.measure.engines import "
              f"dllama\ndllama.run_once('v0.4.0', dllama.SHAPES['dense-512x4'], 2, LinkShape(1.0), 150, "
              f"Path({str(tmp_path / 'run')!r}), Path({str(binary)!r}), timeout_s=120)\n")
    child = subprocess.Popen([sys.executable, "-c", script], preexec_fn=restore_default_sigint,
                             env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(_engine_pids(binary)) < 2:
            time.sleep(0.2)  # the worker and the root are up (a 1 Mbit link keeps them busy for minutes)
        assert len(_engine_pids(binary)) == 2, "the engine's root and worker did not start"
        assert [n for n in list_namespaces() if n.startswith(f"wb{child.pid}-")]
        child.send_signal(2)  # SIGINT, as Ctrl-C
        _, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
    assert b"KeyboardInterrupt" in err
    assert not [n for n in list_namespaces() if n.startswith(f"wb{child.pid}-")]
    assert _engine_pids(binary) == []
