"""A Vega-Lite chart widget that redraws in place: a new spec with the same layout swaps the data and the
title inside the running Vega view instead of re-embedding the chart.

`alt.JupyterChart` re-embeds on every spec change: Vega-Lite compile, Vega parse, a new view and a full
render, about 80-100 ms a chart in headless Chromium on the 2-core machine, one chart after the other
(the three explorer charts: ~0.3 s of the browser's time per slider move). Here the browser compares the
new spec with the embedded one without its `datasets` and `title`; when only those changed it calls
`view.data(name, rows)` and sets two title signals (`wb_title`, `wb_subtitle`), then `runAsync`: Vega
re-evaluates the dataflow from the changed data and updates the SVG. Any other change (the axis scale, the
phase's chart titles, a new preset's layout) re-embeds. Offline: vega-embed, Vega-Lite and Vega come from
vl-convert's bundle, as `alt.JupyterChart.enable_offline()` does.
"""

from __future__ import annotations

from functools import lru_cache

import anywidget
import traitlets

LIVE_CHART_JS = r"""
function liveSpec(spec) {
  // The top-level title's text and subtitle as signals, so a new title needs no re-embed.
  const title = spec.title;
  if (title == null || typeof title !== "object" || typeof title.text !== "string") return spec;
  const params = (spec.params ?? []).concat([{name: "wb_title", value: title.text},
                                             {name: "wb_subtitle", value: title.subtitle ?? ""}]);
  return {...spec, params, title: {...title, text: {expr: "wb_title"}, subtitle: {expr: "wb_subtitle"}}};
}

function layout(spec) {
  // What a redraw in place cannot change: everything but the rows and the title.
  return JSON.stringify({...spec, datasets: null, title: null});
}

async function render({ model, el }) {
  let api = null, shown = null, queue = Promise.resolve();

  const embed = async () => {
    if (api != null) api.finalize();
    api = null;
    const spec = model.get("spec");
    if (spec == null) { el.replaceChildren(); return; }
    try {
      api = await vegaEmbed(el, liveSpec(structuredClone(spec)), structuredClone(model.get("embed_options") ?? {}));
      shown = layout(spec);
    } catch (error) {
      el.innerHTML = '<div style="color:red;">JavaScript Error: ' + error.message + '</div>';
    }
  };

  const redraw = async () => {
    const spec = model.get("spec");
    if (api == null || spec == null || layout(spec) !== shown) return embed();
    for (const [name, rows] of Object.entries(spec.datasets ?? {})) api.view.data(name, structuredClone(rows));
    if (spec.title != null && typeof spec.title.text === "string") {
      api.view.signal("wb_title", spec.title.text).signal("wb_subtitle", spec.title.subtitle ?? "");
    }
    await api.view.runAsync();
  };

  const later = (step) => { queue = queue.then(step, step); return queue; };  // one redraw at a time, in order
  model.on("change:spec", () => later(redraw));
  model.on("change:embed_options", () => later(embed));
  await later(embed);
  return () => { if (api != null) api.finalize(); };
}

export default { render };
"""


@lru_cache(maxsize=1)
def bundled_js() -> str:
    """The widget's module with vega-embed, Vega-Lite and Vega bundled in (vl-convert; no CDN needed)."""
    import vl_convert as vlc
    from altair.utils._importers import vl_version_for_vl_convert

    return vlc.javascript_bundle(LIVE_CHART_JS, vl_version=vl_version_for_vl_convert())


class LiveChart(anywidget.AnyWidget):
    """A Vega-Lite spec (dict) shown in the page; setting `spec` redraws it (in place where only the rows
    and the title changed)."""

    _css = ".vega-embed { overflow: visible; }"  # the tooltip is not cut off
    spec = traitlets.Dict(allow_none=True).tag(sync=True)
    embed_options = traitlets.Dict(default_value=None, allow_none=True).tag(sync=True)

    def __init__(self, spec: dict, embed_options: dict | None = None, **kwargs):
        super().__init__(spec=spec, embed_options=embed_options, _esm=bundled_js(), **kwargs)
