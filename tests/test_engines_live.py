"""A live llama.cpp run here (skipped with the reason where the engines extra is not installed): a tiny random-weight
GGUF written with `gguf`, quantized by llama.cpp, timed llama-bench's way, and its profile read back as a device."""

from __future__ import annotations

import pytest

from workbench.core.errors import WorkbenchError
from workbench.measure.engines.gguf_model import write_gguf
from workbench.measure.engines.profile import tiny_model

llama_cpp = pytest.importorskip("llama_cpp", reason="the engines extra (llama-cpp-python) is not installed: "
                                "pip install '.[engines]' builds it (make test does)")
gguf = pytest.importorskip("gguf", reason="gguf is not installed")


def test_a_tiny_gguf_is_written_quantized_and_timed(tmp_path):
    from workbench.measure.engines.llamacpp import quantize, time_model

    model = tiny_model(2)
    source = write_gguf(model, tmp_path / "tiny.gguf")
    reader = gguf.GGUFReader(str(source))
    fields = {f.name: f for f in reader.fields.values()}
    assert bytes(fields["general.architecture"].parts[-1]).decode() == "llama"
    assert int(fields["llama.block_count"].parts[-1][0]) == 2
    assert int(fields["llama.embedding_length"].parts[-1][0]) == model.d_model
    q4 = quantize(source, tmp_path / "tiny-q4_0.gguf", "q4_0")
    types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(str(q4)).tensors}
    assert types["blk.0.ffn_up.weight"] == "Q4_0" and types["blk.1.attn_q.weight"] == "Q4_0"
    assert types["blk.0.attn_norm.weight"] == "F32"  # norms stay f32
    timing = time_model(q4, threads=1, prompt_tokens=8, decode_tokens=4, repeats=1)
    assert 0 < timing.decode_s < 1.0 and 0 < timing.prefill_s < 5.0  # a 2-layer d=64 model: milliseconds
    assert (timing.threads, timing.prompt_tokens, timing.decode_tokens) == (1, 8, 4)


def test_a_bad_format_is_one_line(tmp_path):
    from workbench.measure.engines.llamacpp import quantize

    with pytest.raises(WorkbenchError, match="format must be one of") as caught:
        quantize(tmp_path / "x.gguf", tmp_path / "y.gguf", "q4_9")
    assert "\n" not in str(caught.value)


@pytest.mark.slow
def test_profile_engine_writes_a_device_with_measured_kernel_rates(tmp_path):
    import subprocess
    import sys

    from workbench.core.io import REPO_ROOT
    from workbench.machine.hardware import device_from_table

    out = tmp_path / "box.toml"
    done = subprocess.run([sys.executable, "-m", "workbench", "profile", "--engine", "llama.cpp", "--threads", "1",
                           "--quick", "--out", str(out)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    import tomllib

    device = device_from_table(tomllib.loads(out.read_text()), str(out))
    assert set(device.kernel_rates) == {f"llamacpp_{f}_{s}" for f in ("f16", "q8_0", "q4_0") for s in ("gemv", "gemm")}
    assert all(1e8 < r < 1e13 for r in device.kernel_rates.values())  # MAC/s of one core: 0.1 to 10^4 GMAC/s
    assert device.cores == 1 and device.provenance["kernel_rate_llamacpp_q4_0_gemv"].kind == "measured"
