"""Text from outside (a config value, a file name, a job file's field, a scheduler's answer) as a terminal or a
script line may show it: control characters found and spelled out, never sent. A base module: it imports nothing of
hpcqa's, and the error messages (errors.py) use it as every layer does."""

from __future__ import annotations

import re

# C0 (NUL, tab, newline, CR, ESC ...), DEL, C1 (NEL U+0085 among them) and Unicode's line and paragraph
# separators (U+2028, U+2029): YAML readers (PyYAML, libyaml, go-yaml) break lines at NEL, LS and PS as at "\n",
# so in a pod script's block scalar any of them would start a new line of the script.
# C0, DEL, C1, the line/paragraph separators, and the bidirectional overrides and isolates (U+202A-U+202E,
# U+2066-U+2069), which reorder what a terminal shows after them
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def control_char(text: str) -> str | None:
    """The first control character of `text`, spelled so that a terminal shows it ('\\n'), or None."""
    m = CONTROL.search(text)
    return None if m is None else repr(m.group(0))[1:-1] + f" at position {m.start()}"


def shown(text: object) -> str:
    """`text` (a path: its str) with every control character spelled as its escape ('\\n', '\\x85', '\\u2028'):
    for a comment line of a script or a line on the terminal (a config's file name, which no check refuses), where a
    raw one would start a new line or be obeyed as a command."""
    return CONTROL.sub(lambda m: repr(m.group(0))[1:-1], str(text))


def shown_lines(text: str) -> str:
    """`text` with every control character spelled out but the line breaks, which stay: for output of several
    lines (a table, a detail view) whose single names were spelled out whole with shown()."""
    return "\n".join(shown(line) for line in text.split("\n"))


def one_line(text: str, limit: int = 120) -> str:
    """`text` on one line (runs of white space made one space), cut to `limit` characters with an ellipsis."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def plural(count: int, noun: str) -> str:
    """'1 trial', '2 trials'."""
    return f"{count} {noun}" + ("" if count == 1 else "s")
