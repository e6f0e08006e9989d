"""The devices notebook's sensitivity chart: what each assumed constant moves, one row per constant a device has.

Grouping the constants inside each device's band (`yOffset`) gives every band a slot for every constant, so a
constant only some devices have draws its bar at the band's edge, between two device labels. Here each device is
a panel (its name as the panel's header) whose rows are its own constants, so every bar sits on its labelled row.
"""

from __future__ import annotations

from collections.abc import Sequence

import altair as alt
import pandas as pd


def sensitivity_chart(frame: pd.DataFrame, order: Sequence[str], x_title: str, title: str,
                      width: int = 460) -> alt.FacetChart:
    """A bar per (device, constant) of `frame` (device, constant, value, low_change, high_change) from the change
    when the constant is divided (hollow end) to when it is multiplied (filled end), a grey rule at no change,
    one panel per device in `order`."""
    rows = {"y": alt.Y("constant:N", title=None),
            "color": alt.Color("constant:N", legend=alt.Legend(orient="bottom", columns=3))}
    layer = alt.layer(
        alt.Chart().mark_rule(strokeWidth=3).encode(
            x=alt.X("low_change:Q", axis=alt.Axis(format="%"), title=x_title), x2="high_change:Q", **rows),
        alt.Chart().mark_point(filled=True, size=25).encode(
            x="high_change:Q", tooltip=["device", "constant", "value", "low_change", "high_change"], **rows),
        alt.Chart().mark_point(size=25).encode(x="low_change:Q", **rows),
        alt.Chart().mark_rule(color="grey").encode(x=alt.datum(0.0)),  # no change: across the whole panel
    )
    header = alt.Header(labelAngle=0, labelOrient="top", labelAnchor="start", labelFontWeight="bold")
    return layer.properties(width=width, height=alt.Step(14)).facet(
        row=alt.Row("device:N", sort=list(order), title=None, header=header), data=frame, spacing=4,
    ).resolve_scale(y="independent").properties(title=title)
