"""The explorer's state, pure: presets and TOML files as `UserConfig`s, every control a view of one of its
fields (`control_values`), moved controls applied (`configure`), and the `State` (deployment + view choices)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from workbench.core.errors import WorkbenchError, require_choice, require_int
from workbench.core.fields import declared_fields
from workbench.core.io import REPO_ROOT
from workbench.core.units import GIB, bytes_per_s_to_mbps
from workbench.machine.hardware import device_names, load_device
from workbench.machine.network import Link, Topology
from workbench.model.formats import RECIPE_DEFAULTS, recipe_bits
from workbench.model.models import MODELS, get_model
from workbench.model.routing import CACHE_POLICIES, ROUTING_KINDS, ExpertCache, Routing, check_cache
from workbench.scenarios.regimes import with_device_count, with_link, with_memory_budget
from workbench.scenarios.speculative import NGRAM, Speculation, allowed_drafts, check_draft, expected_tokens
from workbench.scenarios.userconfig import (
    ENTRY_FIELDS,
    MODEL_FIELDS,
    WEIGHT_FORMATS,
    WORKLOAD_KEYS,
    UserConfig,
    load_config,
)
from workbench.schemes.base import PHASES, Cluster, Workload

EXAMPLES_DIR = REPO_ROOT / "examples"
ALL = "all"
MAX_DEVICES = 64  # the device slider's end (further where a file has more)
MAX_DEVICE_COUNT = int(ENTRY_FIELDS["count"].high)  # what a deployment TOML allows
MAX_TOKENS = 4096  # the token sliders' end (further where a file has more)
KV_AS_ACTIVATIONS = "as activations"  # the KV-format choice of a file without kv_bits / kv_format
DEVICE_PRESET_COUNT = 4  # a data/devices preset starts as four such devices ...
DEVICE_PRESET_MODEL = "Llama 2-7B"  # ... running this model (then the controls move it)
NO_DRAFT = "none"  # the draft control's choice for plain decode (no [speculative] table)
SPECULATION_CONTROLS = ("draft", "placement", "gamma", "alpha")  # the [speculative] keys with a control
# Where the draft controls start for a file without [speculative] (they change nothing until a draft is chosen):
# Speculation's own default gamma and placement, and an alpha near llama.cpp PR #3006's code example (quoted in
# data/speculative/acceptance.csv: 87.8 % of 16 drafted tokens accepted) rounded to the slider's 0.05 steps
START_ALPHA = 0.85
ALPHA_SLIDER = (0.0, 0.95, 0.05)  # the alpha slider: i.i.d. acceptance, below 1 (Leviathan et al. 2023, Sec. 3.1)
BOARD_COUNTS = 5  # "will more boards help?" sweeps at most this many device counts (one arena each)


def preset_names() -> list[str]:
    """Example deployments (examples/<stem>.toml) first, then device presets (data/devices/<id>.toml)."""
    return example_names() + device_names()


@lru_cache(maxsize=64)
def _load_config_cached(path: str, mtime: float) -> UserConfig:
    return load_config(path)


def example_names() -> list[str]:
    """Stems of the example deployments in examples/."""
    return sorted(p.stem for p in EXAMPLES_DIR.glob("*.toml"))


def load_preset(preset: str) -> UserConfig:
    """An example or any TOML path -> its UserConfig (`load_config`, what whatif reads); a device id -> the
    deployment `device_config` makes of it."""
    path = Path(preset)
    if path.is_dir():
        raise WorkbenchError(f"config file {preset!r} is a directory; give a .toml file")
    if preset.endswith(".toml"):
        path = path if path.is_absolute() else (REPO_ROOT / path if not path.exists() else path)
    elif (EXAMPLES_DIR / f"{preset}.toml").exists():
        path = EXAMPLES_DIR / f"{preset}.toml"
    elif preset in device_names():
        return device_config(preset)
    else:
        raise WorkbenchError(f"unknown preset {preset!r}; examples: {', '.join(example_names())} "
                             f"(or a device id from data/devices/, or a path to a .toml file)")
    if path.is_dir():
        raise WorkbenchError(f"config file {preset!r} is a directory; give a .toml file")
    if not path.is_file():
        raise WorkbenchError(f"config file {preset!r} does not exist")
    return _load_config_cached(str(path), path.stat().st_mtime)


@lru_cache(maxsize=32)
def device_config(device_id: str) -> UserConfig:
    """A data/devices preset as a deployment: four of it on a 1 Gbit switch (50 µs per hop) running
    Llama 2-7B in fp16 on a 128-token prompt (a starting point the controls then move)."""
    device = load_device(device_id)
    link = Link.from_mbps(1000.0, 0.05, name="1000 Mbps")
    cluster = Cluster((device,) * DEVICE_PRESET_COUNT, Topology("switch", DEVICE_PRESET_COUNT, link))
    return UserConfig(f"{DEVICE_PRESET_COUNT}x {device.name}", get_model(DEVICE_PRESET_MODEL), cluster,
                      Workload(phase="decode", weight_format="fp16"), activation_format="fp16")


# ---- the controls: views of a UserConfig's fields ----------------------------------------------------
def format_choice(bits: float | None, name: str) -> str:
    """What a format control shows: the file's format name, else '<bits> bit' (None: the activations')."""
    if bits is None:
        return KV_AS_ACTIVATIONS
    return name or f"{bits:g} bit"


def format_bits(control: str, choice: str, model=None) -> tuple[float | None, str]:
    """A format control's choice -> (bits, format name): 'q4_0' -> (4.5, 'q4_0'), '6 bit' -> (6.0, ''); a weight
    format may name a llama.cpp file type ('Q4_K_M' -> `model`'s file's average bits, `formats.recipe_bits`)."""
    if choice == KV_AS_ACTIVATIONS and control == "kv_format":
        return None, ""
    if choice in WEIGHT_FORMATS:
        return WEIGHT_FORMATS[choice], choice
    if control == "weight_format" and choice in RECIPE_DEFAULTS and model is not None:
        return recipe_bits(model, choice), choice
    number = choice.removesuffix(" bit")
    try:
        bits = float(number)
    except ValueError:
        raise WorkbenchError(f"{control} must be one of {', '.join(WEIGHT_FORMATS)} or '<bits> bit', "
                             f"got {choice!r}") from None
    return MODEL_FIELDS["weight_bits"].check(control, bits), ""


def control_values(config: UserConfig) -> dict[str, object]:
    """The value each explorer control shows for a deployment (model, cluster, link, workload, formats)."""
    link = config.cluster.topology.link
    return {"model": config.model.name, "n_devices": config.cluster.n,
            "bandwidth_mbps": bytes_per_s_to_mbps(link.bandwidth_bytes_per_s), "latency_ms": link.latency_s * 1e3,
            "memory_gib": config.cluster.devices[0].memory_bytes / GIB, "seq_len": config.seq_len,
            "kv_len": config.kv_len, "weight_format": format_choice(config.weight_bits, config.weight_format),
            "activation_format": format_choice(config.activation_bits, config.activation_format),
            "kv_format": format_choice(config.kv_bits, config.kv_format), **moe_values(config),
            **speculation_values(config)}


# ---- mixture-of-experts controls: one per routing / expert-cache key a deployment TOML accepts -------------
# key -> (widget kind, its range or the `workbench.model.routing` tuple of its choices). A key gets a control where the
# routing dataclasses declare it, the parser accepts it ([workload]) and a Workload field carries it to the
# schemes (`MOE_OWNERS`), so a key that would change nothing has no control.
MOE_WIDGETS = {"routing": ("choice", ROUTING_KINDS), "routing_skew": ("float", (0.0, 3.0, 0.1)),
               "routing_locality": ("float", (0.0, 0.95, 0.05)), "cache_experts": ("int", (0, 256)),
               "cache_policy": ("choice", CACHE_POLICIES)}
MOE_LABELS = {"routing": "expert routing", "routing_skew": "routing skew (Zipf)",
              "routing_locality": "routing locality", "cache_experts": "expert cache / layer",
              "cache_policy": "expert cache policy"}
MOE_OWNERS = {Routing: "routing", ExpertCache: "expert_cache"}  # workbench.model.routing class -> Workload field


def moe_fields() -> dict[str, tuple[type, str, str]]:
    """Key -> (its `workbench.model.routing` dataclass, the Workload field holding it, the dataclass field) for every
    MoE key the explorer has a control for."""
    return {tk.key: (cls, owner, f.name) for cls, owner in MOE_OWNERS.items() for f, spec in declared_fields(cls)
            for tk in spec.toml if tk.key in MOE_WIDGETS and tk.key in WORKLOAD_KEYS}


MOE_CONTROLS = tuple(moe_fields())
CONTROLS = ("model", "n_devices", "bandwidth_mbps", "latency_ms", "memory_gib", "seq_len", "kv_len",
            "weight_format", "activation_format", "kv_format") + MOE_CONTROLS + SPECULATION_CONTROLS


def moe_values(config: UserConfig) -> dict[str, object]:
    """What each MoE control shows: the deployment's routing / expert-cache fields (a per-layer skew: its first)."""
    values = {}
    for key, (cls, owner, name) in moe_fields().items():
        value = getattr(getattr(config, owner) or cls(), name)
        values[key] = float(value[0]) if isinstance(value, tuple) else value
    return values


def configure_moe(config: UserConfig, changes: dict) -> UserConfig:
    """`config` with moved MoE controls applied to its routing / expert cache (each checked: one line)."""
    for key, value in changes.items():
        if key not in moe_fields():
            continue
        cls, owner, name = moe_fields()[key]
        config = config.with_workload(**{owner: replace(getattr(config, owner) or cls(), **{name: value})})
    cache = config.expert_cache
    if cache is not None and config.model.is_moe:
        check_cache(cache.experts, config.model.n_experts)
    return config


# ---- speculative decoding controls: the [speculative] table's draft, placement, gamma and alpha -------------
def draft_options(model, shown: str) -> list[tuple[str, str]]:
    """The draft dropdown: none, n-gram prompt lookup, the registered decoders smaller than the target `model` with
    its vocabulary (`speculative.allowed_drafts`; the draft shown kept, marked, where it is not one of them)."""
    drafts = [name for name in allowed_drafts(model) if name != NGRAM]
    options = [("none (plain decode)", NO_DRAFT), ("ngram (prompt lookup, no model)", NGRAM)] + \
        [(f"{name} ({get_model(name).total_params() / 1e9:.3g}B)", name) for name in drafts]
    if shown not in {value for _, value in options}:
        options.append((f"{shown} (not a draft for {model.name}: larger, or another vocabulary)", shown))
    return options


def shown_alpha(spec: Speculation) -> float:
    """What the alpha control shows: the file's alpha, or for accepted_lengths the i.i.d. alpha with the same
    expected tokens per step at its gamma (`speculative.alpha_from_tokens`; the slider's end where none does)."""
    if spec.alpha is not None:
        return float(spec.alpha)
    from workbench.scenarios.speculative import alpha_from_tokens

    try:
        return alpha_from_tokens(expected_tokens(spec.gamma, None, spec.accepted_lengths), spec.gamma)
    except WorkbenchError:
        return ALPHA_SLIDER[1]


def speculation_values(config: UserConfig) -> dict[str, object]:
    """What the draft, placement, gamma and alpha controls show (their starting points without [speculative])."""
    spec = config.speculation
    if spec is None:
        return {"draft": NO_DRAFT, "placement": Speculation.placement, "gamma": Speculation.gamma,
                "alpha": START_ALPHA}
    return {"draft": spec.draft, "placement": spec.placement, "gamma": spec.gamma, "alpha": shown_alpha(spec)}


def configure_speculation(config: UserConfig, changes: dict) -> UserConfig:
    """`config` with moved draft / placement / gamma / alpha controls applied to its speculation (plain decode
    for draft "none"); placement "own" without a device of the file's runs the draft on a spare device like the
    first one, over the deployment's link. The draft is checked against the target (one line)."""
    moved = {key: changes[key] for key in SPECULATION_CONTROLS if key in changes}
    values = {**speculation_values(config), **moved}
    spec = config.speculation
    if moved and values["draft"] == NO_DRAFT:
        return replace(config, speculation=None)
    if moved:
        from workbench.scenarios.userconfig import SPECULATIVE_FIELDS

        gamma = SPECULATIVE_FIELDS["gamma"].check("gamma", values["gamma"])
        base = spec or Speculation(values["draft"], alpha=START_ALPHA)
        acceptance = {"alpha": values["alpha"], "accepted_lengths": None} if "alpha" in moved or spec is None else {}
        spec = replace(base, draft=values["draft"], placement=values["placement"], gamma=gamma, **acceptance) \
            if values["placement"] != "own" or base.device is not None else \
            replace(base, draft=values["draft"], placement="own", gamma=gamma, device=config.cluster.devices[0],
                    link=config.cluster.topology.link, **acceptance)
    if spec is None:
        return config
    if spec.placement == "own" and spec.link != config.cluster.topology.link:  # the draft's link follows [network]
        spec = replace(spec, link=config.cluster.topology.link)
    check_draft(spec, config.model, config.cluster, config.workload("decode"))
    return replace(config, speculation=spec)


def configure(base: UserConfig, **changes) -> UserConfig:
    """`base` with some controls moved (`CONTROLS` names -> values); every field no control shows (per-message
    overhead, a shared machine, group size, device constants) is kept, so untouched controls give `base`."""
    for name in changes:
        require_choice("explorer control", name, CONTROLS)
    config = base
    if "model" in changes and changes["model"] != base.model.name:
        config = replace(config, model=get_model(changes["model"]))
        if config.weight_format in RECIPE_DEFAULTS and "weight_format" not in changes:  # a file type's bits follow the model
            config = config.with_workload(weight_bits=recipe_bits(config.model, config.weight_format))
    for kind in ("weight", "activation", "kv"):
        if f"{kind}_format" in changes:
            bits, name = format_bits(f"{kind}_format", changes[f"{kind}_format"], config.model)
            config = config.with_workload(**{f"{kind}_bits": bits})
            config = config.with_workload(weight_format=name) if kind == "weight" else \
                replace(config, **{f"{kind}_format": name})
    if "seq_len" in changes:
        config = config.with_workload(seq_len=require_int("sequence length", changes["seq_len"], low=1))
    if "kv_len" in changes:
        config = config.with_workload(kv_len=require_int("tokens attended (kv_len)", changes["kv_len"], low=1))
    cluster = config.cluster
    if "n_devices" in changes:
        cluster = with_device_count(cluster, changes["n_devices"], most=MAX_DEVICE_COUNT)
    cluster = with_link(cluster, changes.get("bandwidth_mbps"), changes.get("latency_ms"))
    if "memory_gib" in changes:
        cluster = with_memory_budget(cluster, changes["memory_gib"])
    config = configure_moe(replace(config, cluster=cluster), changes)
    return configure_speculation(config, changes) if changes else config


@dataclass(frozen=True)
class State:
    """What the explorer shows: a deployment (a parsed TOML, controls applied) and the view choices."""

    config: UserConfig
    preset: str = "sbc_gigabit"
    scheme: str = ALL
    phase: str = "prefill"

    def __post_init__(self) -> None:
        if not isinstance(self.config, UserConfig):
            raise WorkbenchError(f"explorer state needs a UserConfig, got {type(self.config).__name__}")
        require_choice("phase", self.phase, PHASES)


def state_for_preset(preset: str = "sbc_gigabit", scheme: str = ALL, phase: str = "prefill", **changes) -> State:
    """The state of a preset (example, TOML path or device id) as loaded, with `changes` (`configure`) applied."""
    return State(configure(load_preset(preset), **changes), preset, scheme, phase)


def toml_label(path: str) -> str:
    """The preset dropdown's entry for a TOML file of one's own."""
    return f"TOML file: {Path(path).name}"


def model_options(config: UserConfig) -> list[tuple[str, str]]:
    """The model dropdown: the deployment's own model first when it is not a registered one (given by its
    dimensions, or a registered one changed), then the registry."""
    own = [] if config.model.name in MODELS else [(f"{config.model.name} (from the file)", config.model.name)]
    return own + [(name, name) for name in MODELS]


def format_options(control: str, shown: str) -> list[tuple[str, str]]:
    """A format dropdown: the named formats with their bits, the file's own '<bits> bit' where it gave bits."""
    named = [(f"{name} ({bits:g} bit)", name) for name, bits in WEIGHT_FORMATS.items()]
    files = [(f"{name} (llama.cpp file type)", name) for name in RECIPE_DEFAULTS] if control == "weight_format" else []
    same = [("as the activations", KV_AS_ACTIVATIONS)] if control == "kv_format" else []
    listed = {value for _, value in named + files}
    own = [] if shown in listed or shown == KV_AS_ACTIVATIONS else [(f"{shown} (from the file)", shown)]
    return same + own + named + files
