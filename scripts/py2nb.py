#!/usr/bin/env python3
"""Convert a percent-format script (`# %%` cells, `# %% [markdown]`, `# %% tags=["parameters"]`)
into a notebook without outputs, on the workbench kernel. Usage: py2nb.py SRC.py OUT.ipynb"""

import json
import re
import sys


def convert(src: str) -> dict:
    cells, kind, tags, lines = [], None, [], []

    def flush():
        if kind is None:
            return
        text = "\n".join(lines).strip("\n")
        if kind == "markdown":
            text = "\n".join(l[2:] if l.startswith("# ") else l.lstrip("#") for l in text.splitlines())
            cells.append({"cell_type": "markdown", "metadata": {}, "source": text})
        else:
            cells.append({"cell_type": "code", "metadata": {"tags": tags} if tags else {}, "source": text,
                          "outputs": [], "execution_count": None})

    for line in src.splitlines():
        m = re.match(r"^# %%(.*)$", line)
        if m:
            flush()
            header = m.group(1)
            kind = "markdown" if "[markdown]" in header else "code"
            t = re.search(r"tags=\[(.*?)\]", header)
            tags = [x.strip().strip("'\"") for x in t.group(1).split(",")] if t else []
            lines = []
        else:
            lines.append(line)
    flush()
    return {"cells": cells, "metadata": {
        "kernelspec": {"display_name": "Workbench (Python 3)", "language": "python", "name": "workbench"},
        "language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5}


if __name__ == "__main__":
    nb = convert(open(sys.argv[1]).read())
    for i, c in enumerate(nb["cells"]):
        c["id"] = f"cell-{i}"
    with open(sys.argv[2], "w") as f:
        json.dump(nb, f, indent=1)
        f.write("\n")
