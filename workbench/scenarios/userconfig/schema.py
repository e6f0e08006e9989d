"""The deployment TOML's schema: its tables' keys (each declared once, as a `FieldSpec` on the dataclass field it
sets) and the typed deployment, `UserConfig`, that a parsed file becomes."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from workbench.core.errors import WorkbenchError
from workbench.core.fields import FieldSpec, TomlKey, declared_fields
from workbench.core.units import GIB
from workbench.machine.hardware import (
    DeviceSpec,
    MemoryLevel,
)
from workbench.machine.network import Link, Topology
from workbench.model.formats import weight_formats
from workbench.model.models import TransformerConfig
from workbench.model.routing import (
    ExpertCache,
    Routing,
)
from workbench.scenarios.speculative import Speculation
from workbench.schemes.base import Cluster, Workload
from workbench.schemes.workload import ENGINE_NAMES

# Bits per weight of every named format, one table (`workbench.model.formats`, quoted from ggml's block layouts:
# q4_0 = 18 B per 32 weights = 4.5 bit, q4_k = 144 B per 256 = 4.5, q6_k = 6.5625, mxfp4 = 4.25, plus the
# plain fp32/fp16/int8/int4). A weight_format may instead name a llama.cpp file type (Q4_K_M, ...): the bits
# are then that model's file's average (`formats.recipe_bits`).
WEIGHT_FORMATS = weight_formats()

TOP_KEYS = ("meta", "model", "workload", "network", "devices", "cluster", "speculative", "schemes")
# A [[devices]] entry's own keys beside the DeviceSpec fields' (declared once, here).
ENTRY_FIELDS = {
    "count": FieldSpec("identical devices of this kind", "devices", 1, 1024, kind="integer", toml=(TomlKey("count"),)),
    "preset": FieldSpec("a data/devices id or a path to a device TOML (relative to this file) in place of the "
                        "device's own keys", kind="text", toml=(TomlKey("preset"),)),
    "ram_gib": FieldSpec("with preset: the board's RAM, one of the sizes the preset lists it sold in (ram_variants)",
                         "B", 0.0, math.inf, low_open=True, file_high=2.0**40, toml=(TomlKey("ram_gib", GIB, "GiB"),)),
    "os_reserve_gib": FieldSpec("with preset: RAM the operating system keeps; the model's memory is board RAM less "
                                "this (default: the preset's os_reserve, else 0)", "B", 0.0, math.inf,
                                file_high=2.0**40, toml=(TomlKey("os_reserve_gib", GIB, "GiB"),)),
}
BOARD_KEYS = ("ram_gib", "os_reserve_gib", "memory")  # a preset entry's board keys (`preset_board`)


@dataclass(frozen=True)
class TomlField:
    """One deployment-TOML key of a declared field: the field's `FieldSpec` and the key (name, scale to SI,
    unit); its range and checks are in the key's own units, what a file writes."""

    spec: FieldSpec
    key: TomlKey

    @property
    def kind(self) -> str:
        """number | integer | text (the spec's)."""
        return self.spec.kind

    @property
    def help(self) -> str:
        """What the key means (the spec's)."""
        return self.spec.help

    @property
    def high(self) -> float:
        """The largest value a file may give, in the key's units."""
        return self.spec.bounds(from_file=True)[1] / (1.0 if self.kind == "integer" else self.key.scale)

    def range_text(self, from_file: bool = True) -> str:
        """The allowed range in one phrase, in the key's units."""
        return self.spec.range_text(self.key.scale, from_file)

    def check(self, name: str, value):
        """`value` (in the key's units) in SI if a file may give it, else a one-line error naming `name`."""
        return self.spec.check(name, value, self.key.scale, from_file=True)


def section_fields(*classes, only: tuple[str, ...] | None = None) -> dict[str, TomlField]:
    """TOML key -> `TomlField` of the declared fields of `classes` (those named in `only`, in that order, when
    given): a section's keys, declared once on the dataclasses that hold them."""
    found = {tk.key: TomlField(spec, tk) for cls in classes for _, spec in declared_fields(cls) for tk in spec.toml}
    return found if only is None else {key: found[key] for key in only}


NETWORK_FIELDS = section_fields(Topology, Link, only=("topology", "bandwidth_mbps", "latency_ms", "group_size",
                                                      "message_overhead_us"))
WORKLOAD_FIELDS = section_fields(Workload, only=("seq_len", "kv_len"))
MODEL_FIELDS = {**section_fields(Workload, only=("weight_bits", "activation_bits", "kv_bits")),
                **section_fields(TransformerConfig)}
SPECULATIVE_FIELDS = section_fields(Speculation)
# [speculative]'s keys beside the Speculation fields' (declared once, here)
SPECULATIVE_EXTRA = {
    "accepted_lengths": "in place of alpha: P(k drafted tokens accepted), k = 0, 1, ..., the last entry P(at least "
                        "that many); probabilities that sum to 1",
    "draft_device": "placement = \"own\": the draft's device, a preset id or a device-TOML path (reached over the "
                    "[network] link)",
    "draft_file": "in place of draft: the draft model as its GGUF file or Hugging Face config.json (a path relative "
                  "to this file), read like [model] file",
}
SPECULATIVE_KEYS = (*SPECULATIVE_FIELDS, *SPECULATIVE_EXTRA, "sources")
# Every [model] / [network] / [workload] number and a [[devices]] entry's count, by key (the check of each).
KEY_FIELDS = {**MODEL_FIELDS, **NETWORK_FIELDS, **WORKLOAD_FIELDS,
              "count": TomlField(ENTRY_FIELDS["count"], ENTRY_FIELDS["count"].toml[0])}

MODEL_DIMS = ("family", "n_layers", "d_model", "n_heads", "n_kv_heads", "d_head", "d_ff", "vocab_size",
              "max_positions", "tie_embeddings", "n_experts", "n_active_experts", "n_shared_experts",
              "n_dense_layers", "d_dense_ff", "router", "kv_lora_rank", "qk_rope_dim", "v_head_dim")
MODEL_KEYS = ("name", "file", "weight_bits", "weight_format", "activation_bits", "activation_format", "kv_bits", "kv_format",
              "sources") + MODEL_DIMS


def toml_keys(cls) -> tuple[str, ...]:
    """The deployment-TOML keys of a dataclass's declared fields, in declaration order."""
    return tuple(tk.key for _, spec in declared_fields(cls) for tk in spec.toml)


def tunable_keys() -> dict[str, tuple[str, float]]:
    """TOML key -> (DeviceSpec field, scale to SI) for every number a [[devices]] entry may set beside
    `preset` (a shared board file, tuned per deployment or by `python -m workbench calibrate`)."""
    return {tk.key: (f.name, tk.scale) for f, spec in declared_fields(DeviceSpec) if spec.kind == "number"
            for tk in spec.toml}


DEVICE_KEYS = (*toml_keys(DeviceSpec), *ENTRY_FIELDS, "sources")
MEMORY_KEYS = (*toml_keys(MemoryLevel), "sources")
NETWORK_KEYS = (*NETWORK_FIELDS, "link_class", "sources")
ROUTING_FIELDS = section_fields(Routing)  # [workload] routing, routing_skew, routing_locality, routing_trace
CACHE_FIELDS = section_fields(ExpertCache)  # [workload] cache_experts, cache_policy, expert_reads
WORKLOAD_KEYS = (*WORKLOAD_FIELDS, *ROUTING_FIELDS, *CACHE_FIELDS, "engine", "sources")
ENGINE_KEY_HELP = ("the engine whose quantized kernels run the generic schemes' weight matmuls (one of "
                   f"{', '.join(ENGINE_NAMES)}; default: the schemes' own dense kernels; needs model.weight_format). "
                   "The engines' own schemes always run their engine's kernels")
META_KEYS = ("name", "description", "sources")
# [cluster] shared_machine: the devices are co-located processes of this machine (a preset id or a device-TOML
# path); work one device does while the others wait for it runs on all of it (`Cluster.shared_machine`)
CLUSTER_KEYS = ("shared_machine", "sources")
CAPACITY_UNITS = {tk.key: tk.scale for tk in MemoryLevel.__dataclass_fields__["capacity_bytes"].metadata["spec"].toml}
PRESET_OVERRIDES = tunable_keys()


@dataclass(frozen=True)
class UserConfig:
    """One deployment: a model on a cluster of devices on one network, and what it runs (a `Workload`: prompt
    length, tokens attended, bits and formats, routing, expert cache, engine), built once from the file."""

    name: str
    model: TransformerConfig
    cluster: Cluster
    # the [workload] and [model] bits of the file, as the decode step's workload (`workload(phase)` gives either)
    base_workload: Workload = Workload(phase="decode")
    path: str = ""
    # the format names the file gave (model.activation_format = "q8_0" ...), "" where it gave bits: what the
    # explorer's format controls show; the cost model reads the bits only (the weight format is the Workload's)
    activation_format: str = ""
    kv_format: str = ""
    speculation: Speculation | None = None  # a [speculative] table: decode with a draft (`workbench.scenarios.speculative`)
    # [schemes.<section>] options (workbench.schemes.options: DllamaOptions ...), applied by the arena
    scheme_options: tuple = ()

    def __post_init__(self) -> None:
        if not isinstance(self.base_workload, Workload):
            raise WorkbenchError(f"base_workload must be a workbench.schemes.workload.Workload, "
                                 f"got {self.base_workload!r}")
        if self.base_workload.phase != "decode" or not self.base_workload.output_head \
                or self.base_workload.verify_tokens != 1:
            raise WorkbenchError("base_workload must be a plain decode step (phase 'decode', output_head, one new "
                                 f"token), got {self.base_workload!r}")

    def workload(self, phase: str) -> Workload:
        """The prefill (time to first token) or decode (time per token) workload of this deployment."""
        return replace(self.base_workload, phase=phase)

    def with_workload(self, **changes) -> UserConfig:
        """This deployment with some of its workload's fields changed (seq_len, weight_bits, routing ...)."""
        return replace(self, base_workload=replace(self.base_workload, **changes))

    @property
    def seq_len(self) -> int:
        """Prompt length (the workload's)."""
        return self.base_workload.seq_len

    @property
    def kv_len(self) -> int:
        """Tokens attended per decode step (the workload's)."""
        return self.base_workload.kv_len

    @property
    def weight_bits(self) -> float:
        """Bits per weight (the workload's)."""
        return self.base_workload.weight_bits

    @property
    def activation_bits(self) -> float:
        """Bits per activation (the workload's)."""
        return self.base_workload.activation_bits

    @property
    def kv_bits(self) -> float | None:
        """Bits per KV-cache element, None for the activations' (the workload's)."""
        return self.base_workload.kv_bits

    @property
    def weight_format(self) -> str:
        """The weight format name the file gave ("" where it gave bits; the workload's)."""
        return self.base_workload.weight_format

    @property
    def routing(self) -> Routing:
        """Which experts a MoE model's tokens touch (the workload's)."""
        return self.base_workload.routing

    @property
    def expert_cache(self) -> ExpertCache | None:
        """A MoE model's expert cache, None for the schemes' default (the workload's)."""
        return self.base_workload.expert_cache

    @property
    def engine(self) -> str:
        """Whose kernels the generic schemes run, "" for their own (the workload's)."""
        return self.base_workload.engine
