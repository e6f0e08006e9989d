"""What a scheme evaluator is asked to run: one generation step's `Workload` (its own module, below `schemes.base`
and `schemes.common`, so both can take it without importing each other)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from workbench.core.errors import WorkbenchError, require_choice, require_int, require_positive
from workbench.core.fields import FieldSpec, TomlKey, declared
from workbench.model.routing import UNIFORM, ExpertCache, Routing

PHASES = ("prefill", "decode")
ENGINE_NAMES = ("llama.cpp", "distributed-llama")  # `workbench.machine.kernel_cost.ENGINES`' names


def _tokens(help: str, key: str) -> FieldSpec:
    """A token count: an integer >= 1 in code, at most 2^20 from a file."""
    return FieldSpec(help, "tokens", 1, math.inf, file_high=1 << 20, kind="integer", toml=(TomlKey(key, 1.0, "tokens"),))


def _bits(help: str, key: str) -> FieldSpec:
    """Bits per element: > 0 in code, in [1, 32] from a file (a [model] key)."""
    return FieldSpec(help, "bit", 0.0, math.inf, low_open=True, file_high=32.0, file_floor=1.0,
                     toml=(TomlKey(key, 1.0, "bit"),))


@dataclass(frozen=True)
class Workload:
    """What to run: prefill of `seq_len` tokens (time to first token) or one decode step at `kv_len`."""

    phase: str = "prefill"
    seq_len: int = declared(_tokens("prompt length (and at most the model's max_positions)", "seq_len"), 128)
    kv_len: int = declared(_tokens("tokens attended per decode step (default: seq_len)", "kv_len"), 128)  # cache + 1
    weight_bits: float = declared(_bits("bits per weight (or weight_format)", "weight_bits"), 16)
    activation_bits: float = declared(_bits(  # activations in memory and on the wire (q8_0: 8.5 bits)
        "bits per activation, in memory and on the wire (or activation_format)", "activation_bits"), 16)
    # cost a decoder's output head (the next token's logits): a generation step, what the arena compares.
    # False = the backbone only, as Galaxy times its classifiers and the MCU and STI papers their blocks.
    output_head: bool = True
    kv_bits: float | None = declared(_bits(  # the KV cache's width (None: the activations'; llama.cpp keeps f16)
        "bits per KV-cache element (or kv_format; default: the activations')", "kv_bits"), None)
    # a decode step's new tokens: 1 for plain decode; gamma + 1 for a speculative verify step (the drafted tokens
    # and the one after them, `workbench.scenarios.speculative`), attending kv_len keys. Not a TOML key: [speculative] sets it.
    verify_tokens: int = 1

    # whose kernels run the matmuls: "" = the scheme's own framework (dense kernels at the device's peak rates, the
    # papers' rows), else an engine (llama.cpp, distributed-llama) whose quantized kernels cost each weight matmul in
    # `weight_format` (`workbench.machine.kernel_cost`); an engine scheme sets it, a deployment may name it for the others
    engine: str = ""
    weight_format: str = ""  # a block format (q4_k) or a llama.cpp file type (Q4_K_M); "" = bits only

    # which experts a MoE layer's tokens touch (`workbench.model.routing`); a dense model ignores it
    routing: Routing = UNIFORM
    # a device's expert cache for a MoE model (`routing.ExpertCache`); None: the scheme's default (free memory)
    expert_cache: ExpertCache | None = None

    def __post_init__(self) -> None:
        require_choice("phase", self.phase, PHASES)
        if self.expert_cache is not None and not isinstance(self.expert_cache, ExpertCache):
            raise WorkbenchError(f"expert_cache must be a workbench.model.routing.ExpertCache or None, got {self.expert_cache!r}")
        if not isinstance(self.routing, Routing):
            raise WorkbenchError(f"routing must be a workbench.model.routing.Routing, got {self.routing!r}")
        if not isinstance(self.output_head, bool):
            raise WorkbenchError(f"output_head must be True or False, got {self.output_head!r}")
        require_int("seq_len", self.seq_len, low=1)
        require_int("kv_len", self.kv_len, low=1)
        require_positive("weight_bits", self.weight_bits)
        require_positive("activation_bits", self.activation_bits)
        if self.kv_bits is not None:
            require_positive("kv_bits", self.kv_bits)
        require_int("verify_tokens", self.verify_tokens, low=1)
        if self.engine not in ("", *ENGINE_NAMES):
            raise WorkbenchError(f"engine must be one of {', '.join(ENGINE_NAMES)} (or \"\": the scheme's own "
                                 f"kernels), got {self.engine!r}")
        if self.engine and not self.weight_format:
            raise WorkbenchError(f"engine {self.engine!r} runs quantized kernels by format: give weight_format "
                                 "(a block format such as q4_0 or a file type such as Q4_K_M)")
        if self.phase == "prefill" and self.verify_tokens != 1:
            raise WorkbenchError(f"verify_tokens applies to decode only (prefill processes seq_len tokens), "
                                 f"got {self.verify_tokens!r} with phase='prefill'")

    @property
    def new_tokens(self) -> int:
        """Tokens processed in this step (S in prefill; in decode 1, or a verify step's gamma + 1)."""
        return self.seq_len if self.phase == "prefill" else self.verify_tokens

    @property
    def cache_bits(self) -> float:
        """Bits per KV-cache element (kv_bits, else the activations')."""
        return self.activation_bits if self.kv_bits is None else self.kv_bits

    @property
    def attended(self) -> int:
        """Keys each query attends to."""
        return self.seq_len if self.phase == "prefill" else self.kv_len
