"""The key table of docs/keys.md, generated from the field declarations (tests/test_fields.py checks the copy)."""

from __future__ import annotations

from workbench.core.fields import FieldSpec, declared_fields
from workbench.machine.hardware import (
    DeviceSpec,
    MemoryLevel,
)
from workbench.machine.network import LINK_CLASSES
from workbench.model.models import ROUTERS
from workbench.scenarios.userconfig.schema import (
    BOARD_KEYS,
    CACHE_FIELDS,
    ENGINE_KEY_HELP,
    ENTRY_FIELDS,
    MODEL_FIELDS,
    NETWORK_FIELDS,
    PRESET_OVERRIDES,
    ROUTING_FIELDS,
    SPECULATIVE_EXTRA,
    SPECULATIVE_FIELDS,
    WORKLOAD_FIELDS,
)


# ---- the key table in docs/keys.md, generated from the declarations ------------------------------------------
def _allowed(spec: FieldSpec, scale: float) -> str:
    """A key's allowed values for the docs table (a file's range, in the key's units)."""
    if spec.kind in ("text", "levels", "list"):
        return {"text": "text", "levels": "list of tables", "list": "list of text"}[spec.kind]
    return spec.range_text(scale, from_file=True).removeprefix("a ").removeprefix("an ").removeprefix("finite ")


def _key_rows(section: str, declarations, tunable: set[str] = frozenset()) -> list[str]:
    """Markdown rows of (table, key, unit, allowed, with preset, meaning) for FieldSpec declarations."""
    rows = []
    for spec in declarations:
        for tk in spec.toml:
            key = tk.key + (".<dtype>" if spec.kind == "per_dtype" else "")
            rows.append(f"| `{section}` | `{key}` | {tk.unit} | {_allowed(spec, tk.scale)} | "
                        f"{'yes' if tk.key in tunable else ''} | {spec.help} |")
    return rows


def config_keys_table() -> str:
    """The [[devices]], [[devices.memory]], [network], [workload] and [model] keys as a Markdown table, derived from
    the field declarations (docs/keys.md carries a copy; tests/test_fields.py checks they agree)."""
    tunable = {"name", "count", "preset", "isa", *BOARD_KEYS, *PRESET_OVERRIDES}
    rows = ["| table | key | unit | allowed | with `preset` | meaning |", "|---|---|---|---|---|---|"]
    rows += _key_rows("[[devices]]", [spec for _, spec in declared_fields(DeviceSpec)], tunable)
    rows += _key_rows("[[devices]]", ENTRY_FIELDS.values(), tunable)
    rows += _key_rows("[[devices.memory]]", [spec for _, spec in declared_fields(MemoryLevel)])
    rows += _key_rows("[network]", [f.spec for f in NETWORK_FIELDS.values()])
    rows.append(f"| `[network]` | `link_class` |  | text |  | a link class whose cited bandwidth, latency and per-message "
                f"time are the defaults (data/constants/links.toml): one of {', '.join(LINK_CLASSES)} |")
    rows += _key_rows("[workload]", [f.spec for f in WORKLOAD_FIELDS.values()])
    rows += _key_rows("[workload]", [f.spec for f in ROUTING_FIELDS.values()])
    rows += _key_rows("[workload]", [f.spec for f in CACHE_FIELDS.values()])
    rows.append(f"| `[workload]` | `engine` |  | text |  | {ENGINE_KEY_HELP} |")
    rows.append("| `[model]` | `file` |  | a path |  | the model as its GGUF file or Hugging Face config.json (relative "
                "to this file; a folder: its config.json): architecture and dimensions, and a GGUF's weight format or "
                "exact bits; keys given beside it win (docs/whatif.md) |")
    rows += _key_rows("[model]", [f.spec for f in MODEL_FIELDS.values()])
    rows.append(f"| `[model]` | `router` |  | text |  | how the router weighs its top-k experts: one of {', '.join(ROUTERS)} |")
    rows += _key_rows("[speculative]", [f.spec for f in SPECULATIVE_FIELDS.values()])
    rows += [f"| `[speculative]` | `{key}` |  | {'list of numbers' if key == 'accepted_lengths' else 'text'} |  | "
             f"{meaning} |" for key, meaning in SPECULATIVE_EXTRA.items()]
    rows += scheme_option_rows()
    rows.append("| `[cluster]` | `shared_machine` |  | a preset id or a device-TOML path |  | the devices are "
                "co-located processes of this machine: work one device does while the others wait for it (a "
                "master's embedding, head and host work) runs on all of it |")
    return "\n".join(rows) + "\n"


# ---- scheme options: [schemes.<section>] (declared beside each scheme, workbench.schemes.options) ----------
def scheme_option_rows() -> list[str]:
    """docs/keys.md rows of the [schemes.<section>] options."""
    from workbench.schemes.options import key_rows

    rows = []
    for section, spec in key_rows():
        rows += _key_rows(section, [spec])
    return rows
