"""Recompute every planner's golden decision and rewrite tests/golden/planners.json (then review the diff).

Run after an intended planner or cost-model change: `.venv/bin/python scripts/regenerate_golden.py`.
"""

from __future__ import annotations

import subprocess

from workbench.papers.golden import GOLDEN_PATH, load, write


def main() -> None:
    before = load() if GOLDEN_PATH.exists() else {}
    path = write()
    after = load()
    changed = sorted(k for k in after if before.get(k) != after[k])
    print(f"wrote {path}: {len(after)} cases, {len(changed)} changed" + (f": {', '.join(changed)}" if changed else ""))
    subprocess.run(["git", "--no-pager", "diff", "--stat", "--", str(path)], check=False)


if __name__ == "__main__":
    main()
