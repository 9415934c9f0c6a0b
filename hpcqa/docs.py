"""`python -m hpcqa.docs`: rewrite the config reference in README.md from the schema in config.py."""

from __future__ import annotations

import sys
from pathlib import Path

from hpcqa.core.config import reference_rows

START, END = "<!-- config-reference:start -->", "<!-- config-reference:end -->"


def table() -> str:
    lines = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for key, tp, default, help_ in reference_rows():
        lines.append(f"| `{key}` | {tp} | `{default}` | {help_.replace('|', '/')} |")
    return "\n".join(lines)


def main(readme: str = "README.md") -> int:
    p = Path(readme)
    text = p.read_text()
    if START not in text or END not in text:
        print(f"{readme}: markers {START} / {END} not found", file=sys.stderr)
        return 2
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    p.write_text(f"{head}{START}\n{table()}\n{END}{tail}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
