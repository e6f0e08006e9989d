"""Reference kernels: KV-cache decoding equals full recomputation; shapes; families."""

import jax.numpy as jnp
import numpy as np
import pytest

from workbench.core.errors import WorkbenchError
from workbench.kernels import reference as ref
from workbench.model.models import tiny_config


@pytest.mark.parametrize("family,kv", [("llama", 8), ("llama", 2), ("gpt", None)])
def test_cache_decoding_matches_full_recompute(family, kv):
    cfg = tiny_config(family, **({"n_kv_heads": kv} if kv else {}))
    params = ref.init_params(cfg, seed=0)
    tokens = np.array([3, 17, 5, 42, 8, 1, 60, 9])
    full = ref.forward(cfg, params, tokens)
    cache = ref.empty_cache(cfg, len(tokens))
    logits, cache = ref.forward_with_cache(cfg, params, tokens[:5], cache)
    np.testing.assert_allclose(logits, full[:5], rtol=2e-4, atol=2e-5)
    for i in range(5, len(tokens)):
        step, cache = ref.forward_with_cache(cfg, params, tokens[i:i + 1], cache)
        np.testing.assert_allclose(step[0], full[i], rtol=2e-4, atol=2e-5)


def test_greedy_generation_consistent_with_forward():
    cfg = tiny_config("llama")
    params = ref.init_params(cfg, seed=1)
    prompt = [1, 2, 3]
    out = ref.generate_greedy(cfg, params, prompt, 4)
    seq = prompt + out
    logits = ref.forward(cfg, params, np.array(seq[:-1]))
    assert [int(t) for t in jnp.argmax(logits[len(prompt) - 1:], -1)] == out


def test_encoder_is_bidirectional():
    cfg = tiny_config("bert")
    params = ref.init_params(cfg, seed=2)
    a = ref.forward(cfg, params, np.array([5, 6, 7, 8]))
    b = ref.forward(cfg, params, np.array([5, 6, 7, 9]))
    assert a.shape == (4, cfg.d_model)
    assert not np.allclose(a[0], b[0])  # the first token sees the last one


def test_decoder_is_causal():
    cfg = tiny_config("gpt")
    params = ref.init_params(cfg, seed=2)
    a = ref.forward(cfg, params, np.array([5, 6, 7, 8]))
    b = ref.forward(cfg, params, np.array([5, 6, 7, 9]))
    np.testing.assert_allclose(a[:3], b[:3], rtol=1e-5)


def test_seed_determinism_and_bad_input():
    cfg = tiny_config("llama")
    a = ref.init_params(cfg, seed=7)["blocks"][0]["wq"]
    b = ref.init_params(cfg, seed=7)["blocks"][0]["wq"]
    np.testing.assert_array_equal(a, b)
    with pytest.raises(WorkbenchError, match="seed"):
        ref.init_params(cfg, seed=-1)
    with pytest.raises(WorkbenchError, match="sequence length"):
        ref.forward(cfg, ref.init_params(cfg, 0), np.zeros(cfg.max_positions + 1, dtype=int))
