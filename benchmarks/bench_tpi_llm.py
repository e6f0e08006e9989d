"""TPI-LLM timings: one cost-model run (prompt + 3 decode tokens, 70B on 8 devices) and one TP decode step."""

import jax
import numpy as np

try:  # 8 host CPU devices, as in the tests (too late if another module already started JAX)
    jax.config.update("jax_num_cpu_devices", 8)
except RuntimeError:
    pass

from workbench.kernels import reference as ref
from workbench.kernels import tpi_llm as K
from workbench.kernels.mesh import make_mesh
from workbench.model.models import get_model, tiny_config
from workbench.papers import tpi_llm as T
from workbench.schemes import tpi_llm as S


def test_simulate_70b_on_8_devices(benchmark):
    model, cluster = get_model("Llama 2-70B"), T.emulated_cluster(8)
    prefill, _ = T.workloads()
    run = benchmark(S.simulate_tpi, model, cluster, prefill, S.default_options())
    assert run.token_latency_s > 0


def test_tp_decode_step_tiny_on_8_devices(benchmark):
    cfg = tiny_config("llama", n_kv_heads=2)
    tp = K.shard_params(cfg, ref.init_params(cfg, 0), make_mesh(min(8, len(jax.devices()))))
    cache = K.tp_empty_cache(tp, 64)
    _, cache = K.tp_prefill(tp, np.arange(4), cache)
    state = {"cache": cache}

    def step():
        logits, state["cache"] = K.tp_decode_step(tp, 7, state["cache"])
        if state["cache"].length >= 60:
            state["cache"] = K.TPCache(state["cache"].k, state["cache"].v, 4)
        return logits

    assert benchmark(step).shape == (cfg.vocab_size,)
