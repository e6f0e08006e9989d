"""Editing a parsed deployment document before it is validated: dotted keys and swept values (`whatif --set`,
`calibrate`)."""

from __future__ import annotations

import re
import tomllib

from workbench.core.errors import WorkbenchError

# ---- editing a parsed document (whatif --set, calibrate) ------------------------------------------
_KEY_PART = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?:\[(\d+)\])?$")


def split_values(text: str) -> list[str]:
    """'100,1000' -> ['100', '1000']: split on the commas outside quotes ("2,1,1" or '2,1,1') and [brackets]
    ([0.5,1.0]), so one swept value may itself hold commas."""
    items, current, quote, depth = [], [], "", 0
    for char in text:
        if quote:
            quote = "" if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char in "[]":
            depth += 1 if char == "[" else -1
        elif char == "," and depth == 0:
            items.append("".join(current))
            current = []
            continue
        current.append(char)
    return items + ["".join(current)]


def parse_values(option: str, text: str) -> list:
    """'100,1000' -> [100, 1000]: each value as TOML reads it (a bare word is a string; a quoted value or a
    [list] may hold commas: '"2,1,1"' is one value)."""
    values = []
    for item in split_values(text):
        item = item.strip()
        if not item:
            raise WorkbenchError(f"{option}: empty value in {text!r}; give comma-separated values (a value with commas "
                                 "in quotes: '\"2,1,1\"')")
        try:
            values.append(tomllib.loads(f"v = {item}")["v"])
        except tomllib.TOMLDecodeError:
            values.append(item)
    return values


def check_key(option: str, key: str) -> str:
    """A dotted key of name or name[index] parts ('devices[0].count'), else a one-line error."""
    for part in key.split("."):
        if not _KEY_PART.match(part):
            raise WorkbenchError(f"{option} key {key!r}: each part must be a name or name[index], got {part!r}")
    return key


def set_key(table: dict, key: str, value, option: str = "--set") -> None:
    """Set a dotted key ('devices[0].count') in a parsed TOML document, creating tables as needed."""
    node = table
    parts = check_key(option, key).split(".")
    for i, part in enumerate(parts):
        name, index = _KEY_PART.match(part).groups()
        last = i == len(parts) - 1
        if index is None:
            if last:
                node[name] = value
                return
            node = node.setdefault(name, {})
            if not isinstance(node, dict):
                raise WorkbenchError(f"{option} {key}: {name} is not a table")
            continue
        items = node.get(name)
        if not isinstance(items, list) or int(index) >= len(items):
            raise WorkbenchError(f"{option} {key}: {name}[{index}] does not exist (the file has "
                                 f"{len(items) if isinstance(items, list) else 0} entries)")
        if last:
            items[int(index)] = value
            return
        node = items[int(index)]
