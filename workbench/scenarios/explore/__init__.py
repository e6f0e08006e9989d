"""Live what-if explorer: ipywidgets controls driving the arena's charts (`workbench.report.livechart.LiveChart`).

One path from a TOML to a result: a preset or TOML file is parsed by `workbench.scenarios.userconfig.load_config` (what
`whatif` reads) into a `UserConfig`; the explorer's state is that deployment plus the view choices (`State`);
every control is a view of one of its fields (`control_values`) and moving one gives a new `UserConfig`
(`configure`); the model call `compute(State) -> View` runs `arena_for_config`, the function whatif runs. The
`Explorer` widget only turns controls into a `State`, calls `compute`, and swaps the charts' specs.
Invalid settings (more devices than heads for the chosen scheme, a budget nothing fits in) raise
`WorkbenchError`; the explorer shows its one line and keeps the previous charts.

The package follows that order: `state` (the deployment and the controls, pure) -> `compute` (what it
evaluates, pure) -> `view` (widgets, HTML tables, charts); each imports only the ones before it.
"""

from workbench.core.units import format_seconds  # the explorer's readouts' time format (tests import it here)
from workbench.scenarios.explore.compute import (
    View,
    board_counts,
    boards_frame,
    chart_frames,
    compute,
    memoised,
    speculation_frame,
    view_result_rows,
)
from workbench.scenarios.explore.state import (
    ALL,
    ALPHA_SLIDER,
    BOARD_COUNTS,
    CONTROLS,
    DEVICE_PRESET_COUNT,
    DEVICE_PRESET_MODEL,
    EXAMPLES_DIR,
    KV_AS_ACTIVATIONS,
    MAX_DEVICE_COUNT,
    MAX_DEVICES,
    MAX_TOKENS,
    MOE_CONTROLS,
    MOE_LABELS,
    MOE_OWNERS,
    MOE_WIDGETS,
    NO_DRAFT,
    SPECULATION_CONTROLS,
    START_ALPHA,
    State,
    configure,
    configure_moe,
    configure_speculation,
    control_values,
    device_config,
    draft_options,
    example_names,
    format_bits,
    format_choice,
    format_options,
    load_preset,
    model_options,
    moe_fields,
    moe_values,
    preset_names,
    shown_alpha,
    speculation_values,
    state_for_preset,
    toml_label,
)
from workbench.scenarios.explore.view import (
    CELL_STYLE,
    SPECULATION_KINDS,
    Explorer,
    boards_html,
    budget_text,
    chart_specs,
    html_table,
    make_controls,
    moe_controls,
    notes_html,
    readouts,
    speculation_controls,
    speculation_html,
    speculation_spec,
    static_charts,
)

__all__ = [
    "ALL", "ALPHA_SLIDER", "BOARD_COUNTS", "CELL_STYLE", "CONTROLS", "DEVICE_PRESET_COUNT",
    "DEVICE_PRESET_MODEL", "EXAMPLES_DIR", "Explorer", "KV_AS_ACTIVATIONS", "MAX_DEVICES", "MAX_DEVICE_COUNT",
    "MAX_TOKENS", "MOE_CONTROLS", "MOE_LABELS", "MOE_OWNERS", "MOE_WIDGETS", "NO_DRAFT", "SPECULATION_CONTROLS",
    "SPECULATION_KINDS", "START_ALPHA", "State", "View", "board_counts", "boards_frame", "boards_html",
    "budget_text", "chart_frames", "chart_specs", "compute", "configure", "configure_moe",
    "configure_speculation", "control_values", "device_config", "draft_options", "example_names", "format_bits",
    "format_choice", "format_options", "format_seconds", "html_table", "load_preset", "make_controls",
    "memoised", "model_options", "moe_controls", "moe_fields", "moe_values", "notes_html", "preset_names",
    "readouts", "shown_alpha", "speculation_controls", "speculation_frame", "speculation_html",
    "speculation_spec", "speculation_values", "state_for_preset", "static_charts", "toml_label",
    "view_result_rows",
]
