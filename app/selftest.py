"""`--self-test MODEL.gguf [DRAFT.gguf]`: prove an install or a bundle works, without a window.

Loads the models, generates a few greedy tokens with speculation on, checks the statistics,
and renders a widget and the app's icon on Qt's offscreen platform (which proves the bundled Qt
libraries, plugins and assets load). Prints one line, `specula self-test OK: ...` or `specula self-test FAILED: ...`,
and returns 0 or 1. It never imports the app's window modules.
"""

from __future__ import annotations

import os
import sys

from engine import DoneEvent, FinishReason, TokenEvent
from engine.config import ChatMessage, DrafterMode, ModelSpec, SamplingParams, SpecParams
from engine.errors import EngineError

MAX_TOKENS = 16
DRAFT_LENGTH = 4
# A prompt with a long, predictable answer, so 16 tokens come before an end-of-turn token.
PROMPT = "Count from 1 to 30, separated by commas."
USAGE = "usage: specula --self-test MODEL.gguf [DRAFT.gguf]"


class SelfTestFailure(Exception):
    """A check did not hold; str(error) says which."""


def check_engine(model: str, draft: str | None) -> str:
    """Load, generate, check the statistics; returns the engine part of the OK line."""
    from engine import Engine  # imported here so `--help`-like misuse stays instant

    engine = Engine(ModelSpec(model, n_ctx=1024), ModelSpec(draft, n_ctx=1024) if draft else None)
    try:
        mode = DrafterMode.DRAFT_MODEL if draft else DrafterMode.LOOKUP
        events = list(
            engine.chat(
                [ChatMessage("user", PROMPT)],
                SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS),
                SpecParams(mode=mode, draft_length=DRAFT_LENGTH),
            )
        )
        info = engine.info
        backend = info.placement() + {"avoided": " (AMX off)", "on": " (AMX on)"}.get(info.amx, "")
    finally:
        engine.close()

    done = events[-1] if events else None
    if not isinstance(done, DoneEvent):
        raise SelfTestFailure("the answer did not end with a DoneEvent")
    if done.finish_reason not in (FinishReason.STOP, FinishReason.LENGTH):
        raise SelfTestFailure(f"generation finished with {done.finish_reason.value}: {done.error or 'no message'}")
    s = done.stats
    streamed = "".join(e.text for e in events if isinstance(e, TokenEvent))
    checks = [
        (s.n_tokens > 0, "no tokens were generated"),
        (s.n_tokens <= MAX_TOKENS, f"{s.n_tokens} tokens generated, more than max_tokens={MAX_TOKENS}"),
        (done.text.strip() != "", "the answer text is empty"),
        (streamed == done.text, "the streamed tokens do not add up to the final text"),
        (sum(s.tokens_by_source.values()) == s.n_tokens, f"tokens by source {s.tokens_by_source} != {s.n_tokens}"),
        (not draft or s.n_drafted > 0, "a draft model was given but drafted nothing"),
        (0 <= s.n_accepted <= s.n_drafted, f"accepted {s.n_accepted} of {s.n_drafted} drafted"),
        (0.0 <= s.acceptance_rate <= 1.0, f"acceptance rate {s.acceptance_rate}"),
        (s.gen_tps > 0, f"generation speed {s.gen_tps} tok/s"),
    ]
    for ok, reason in checks:
        if not ok:
            raise SelfTestFailure(reason)
    return f"backend {backend}, {s.n_tokens} tokens, {s.gen_tps:.1f} tok/s, accepted {s.n_accepted}/{s.n_drafted}"


def check_qt() -> str:
    """Render a label and the app's SVG icon offscreen: Qt's libraries, platform and image plugins,
    a font, and the assets folder where the app looks for it all work."""
    os.environ["QT_QPA_PLATFORM"] = "offscreen"
    from PySide6.QtGui import QColor, QGuiApplication, QIcon
    from PySide6.QtWidgets import QApplication, QLabel

    from app.ui.theme import ASSETS

    _app = QApplication.instance() or QApplication(["specula"])  # kept alive until the checks are done
    label = QLabel("Specula")
    label.setStyleSheet("background: white; color: black; font-size: 32px;")
    label.adjustSize()
    image = label.grab().toImage()
    if image.isNull():
        raise SelfTestFailure("Qt rendered a null image")
    white = QColor("white").rgb()
    if all(image.pixel(x, y) == white for x in range(image.width()) for y in range(image.height())):
        raise SelfTestFailure("Qt rendered no text (no usable font?)")
    svg = ASSETS / "icon.svg"
    icon = QIcon(str(svg)).pixmap(64, 64).toImage()
    if icon.isNull() or icon.pixelColor(32, 32).alpha() == 0:  # the icon is opaque in the middle
        raise SelfTestFailure(f"Qt could not render {svg} (missing file or SVG plugin)")
    return f"qt {QGuiApplication.platformName()} OK"


def run_self_test(model: str, draft: str | None = None) -> int:
    try:
        qt = check_qt()
        result = check_engine(model, draft)
    except (SelfTestFailure, EngineError) as e:
        print(f"specula self-test FAILED: {' '.join(str(e).split())}", flush=True)
        return 1
    except Exception as e:  # anything else is a broken install: say so, in the same one line
        print(f"specula self-test FAILED: {type(e).__name__}: {' '.join(str(e).split())}", flush=True)
        return 1
    print(f"specula self-test OK: {result}, {qt}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Accepts `[--self-test] MODEL [DRAFT]`, so `python -m app.selftest M` and `specula --self-test M` both work."""
    args = [a for a in (sys.argv[1:] if argv is None else argv) if a != "--self-test"]
    if not 1 <= len(args) <= 2 or any(a.startswith("-") for a in args):
        print(USAGE, file=sys.stderr)
        return 2
    return run_self_test(args[0], args[1] if len(args) == 2 else None)


if __name__ == "__main__":
    sys.exit(main())
