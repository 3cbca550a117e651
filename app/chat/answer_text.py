"""An answer's text with its tool calls where they were made: what the model said before a pass's calls,
the calls' blocks, what it said after their results, and so on, as a chat app shows an agent's work.

Each ToolUse records `at`, how far into the answer's text (its passes joined, app/bridge/tool_turn.py)
the model had got when it called. A finished answer is cut there: its Markdown by those offsets, its
coloured tokens where the same count of visible characters ends (the tokens hold each pass's text as
streamed; the joined text adds paragraph breaks between passes and trims around calls, whitespace
only). While an answer streams, a pass's calls arrive when the pass ends, so they go after everything
shown so far, and the next pass streams into a new stretch below them.

An answer without tool calls is one MessageBody, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from PySide6.QtWidgets import QVBoxLayout, QWidget

from app.chat.rich_text import MessageBody
from app.chat.tool_block import ToolBlock, ToolBlocks
from app.core.store import Token
from app.core.tool_steps import ToolUse, cut_text, passes


class AnswerText(QWidget):
    """MessageBody's interface over the whole answer, its stretches of text between groups of tool blocks."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(4)
        self.text = ""
        self.tokens: list[Token] = []
        self.uses: list[ToolUse] = []
        self.streaming = False
        self.colours = False
        self.token_tooltip: Callable[[int], str] | None = None
        self.bodies: list[MessageBody] = []  # the stretches of text, in order
        self.groups: list[ToolBlocks] = []  # groups[i]: the calls made after bodies[i]
        self._starts: list[int] = [0]  # the first token of each body, in the whole answer
        self._add_body()

    # -- MessageBody's interface, for the whole answer -----------------------------------------

    def set_content(
        self, text: str, tokens: Sequence[Token], *, streaming: bool, colours: bool, uses: Sequence[ToolUse] = ()
    ) -> None:
        self.text, self.tokens, self.uses = text, list(tokens), list(uses)
        self.streaming, self.colours = streaming, colours
        self._rebuild()

    def set_colours(self, colours: bool) -> None:
        if colours != self.colours:
            self.colours = colours
            for body in self.bodies:
                body.set_colours(colours)

    def append(self, tokens: Sequence[Token]) -> None:
        self.tokens.extend(tokens)
        self.text += "".join(t.text for t in tokens)
        last = self.bodies[-1]
        last.append(tokens)
        if last.isHidden() and last.text.strip():
            last.show()  # the first words after a call

    def finish(self, text: str, tokens: Sequence[Token], uses: Sequence[ToolUse] | None = None) -> None:
        self.text, self.tokens, self.streaming = text, list(tokens), False
        if uses is not None:
            self.uses = list(uses)
        self._rebuild()

    def plain_text(self) -> str:
        return self.text

    # -- tool calls -------------------------------------------------------------------------------

    @property
    def blocks(self) -> list[ToolBlock]:
        """Every call's block, in the order called."""
        return [block for group in self.groups for block in group.blocks]

    def set_tool_uses(self, uses: list[ToolUse]) -> None:
        """Show the calls as they are now. A known call is updated in place (an unfolded block stays so); a
        new pass's calls during streaming go below the text so far, with a new stretch of text after them."""
        self.uses = list(uses)
        groups = passes(self.uses)
        known = [len(g.blocks) for g in self.groups]
        if [len(g) for g in groups[: len(known)]] != known:
            self._rebuild()  # not what is on screen plus new passes: lay it out again
            return
        for group, calls in zip(self.groups, groups, strict=False):
            group.set_uses(calls)
        for calls in groups[len(known) :]:
            if not self.streaming:
                self._rebuild()
                return
            last = self.bodies[-1]
            last.finish(last.text, last.tokens)  # its pass is over: shown as a finished stretch
            last.setVisible(bool(last.text.strip()))
            self._add_group(calls)
            self._starts.append(len(self.tokens))
            self._add_body().set_content("", [], streaming=True, colours=self.colours)
            self.bodies[-1].hide()  # until the model says something after the call

    # -- layout -----------------------------------------------------------------------------------

    def _rebuild(self) -> None:
        # Mid-stream (a chat opened again while its answer runs) the text is the tokens as streamed, without
        # the joins that `at` counts: a cut may land a character or two late, until the answer finishes.
        unfolded = {block.use.id for block in self.blocks if block.expanded}  # stay so
        for widget in self.bodies + self.groups:
            self._layout.removeWidget(widget)
            widget.hide()
            widget.deleteLater()
        self.bodies, self.groups = [], []
        groups = passes(self.uses)
        texts = cut_text(self.text, groups)
        token_cuts = [token_cut(self.tokens, self.text, calls[0].at) for calls in groups]
        self._starts = [0, *token_cuts]
        ends = [*token_cuts, len(self.tokens)]
        for i, (text, start, end) in enumerate(zip(texts, self._starts, ends, strict=True)):
            body = self._add_body()
            last = i == len(groups)
            body.set_content(text, self.tokens[start:end], streaming=self.streaming and last, colours=self.colours)
            # A pass that called at once said nothing: no empty stretch (an answer without calls keeps its one).
            body.setVisible(bool(text.strip()) or not groups)
            if not last:
                self._add_group(groups[i])
        for block in self.blocks:
            if block.use.id in unfolded:
                block.toggle()

    def _add_body(self) -> MessageBody:
        body = MessageBody(self)
        start = len(self.bodies)
        body.token_tooltip = lambda index: self._tooltip(start, index)
        self._layout.addWidget(body)
        self.bodies.append(body)
        return body

    def _add_group(self, calls: list[ToolUse]) -> None:
        group = ToolBlocks(calls, self)
        self._layout.addWidget(group)
        self.groups.append(group)

    def _tooltip(self, body: int, index: int) -> str:
        """A token's tooltip, asked by its stretch with an index into the stretch."""
        if self.token_tooltip is None or body >= len(self._starts):
            return ""
        return self.token_tooltip(self._starts[body] + index)


def token_cut(tokens: Sequence[Token], text: str, at: int) -> int:
    """How many of the tokens hold text[:at]: counted in visible characters, which the joined passes and
    the streamed tokens share (they differ in whitespace only)."""
    wanted = _visible(text[:at])
    seen = 0
    for i, token in enumerate(tokens):
        if seen >= wanted:
            return i
        seen += _visible(token.text)
    return len(tokens)


def _visible(text: str) -> int:
    return sum(1 for c in text if not c.isspace())
