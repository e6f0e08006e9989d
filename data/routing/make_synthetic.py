"""Writes data/routing/synthetic_8x2_4layers.csv: a synthetic llama-imatrix-style count table (kind assumed)."""
import numpy as np
import pandas as pd

from workbench.core.io import write_csv_atomic
from workbench.model.routing import Routing, simulate_routing

rows = []
for layer, skew in enumerate((0.3, 0.6, 0.9, 1.2)):
    ids = simulate_routing(Routing("skewed", skew=skew), 8, 2, 1000, seed=layer)
    relabel = np.random.default_rng(100 + layer).permutation(8)  # the popular expert differs per layer
    counts = np.bincount(relabel[ids].ravel(), minlength=8)
    src = (f"synthetic, not measured: 1000 tokens of workbench.model.routing.simulate_routing(Routing('skewed', skew={skew}), "
           f"8, 2, 1000, seed={layer}), experts relabelled by numpy default_rng({100 + layer}).permutation(8)")
    rows += [dict(layer=layer, expert=e, count=int(c), kind="assumed", source=src) for e, c in enumerate(counts)]
write_csv_atomic("data/routing/synthetic_8x2_4layers.csv", pd.DataFrame(rows))
