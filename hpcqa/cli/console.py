"""The rich Console every verb prints with: whatever it renders reaches the terminal with its control characters
spelled out (text.shown, the rule of the registry's rows), line breaks kept. A name that came from outside (a
config's file name, a path given with -o or --registry, a job folder's text) cannot send an escape sequence or a
bidi override through a table, a panel or a title that forgot to spell it out."""

from __future__ import annotations

from typing import Any, Iterable

import rich.console
from rich.console import ConsoleOptions, RenderableType
from rich.segment import Segment
from rich.text import Text

from hpcqa.text import CONTROL, shown_lines


class Console(rich.console.Console):
    def render_str(self, text: str, *args: Any, **kwargs: Any) -> Text:
        """A string (a cell, a line, a title) is spelled out before it is measured: the columns stay aligned."""
        return super().render_str(shown_lines(text), *args, **kwargs)

    def render(
        self, renderable: RenderableType, options: ConsoleOptions | None = None
    ) -> Iterable[Segment]:
        """Every segment of text, a Text object's too (which render_str does not see); rich's own control segments
        (cursor moves, a live display's) go as they are."""
        for segment in super().render(renderable, options):
            text, style, control = segment
            if control or text == "\n" or not CONTROL.search(text):
                yield segment
            else:
                yield Segment(shown_lines(text), style, control)
