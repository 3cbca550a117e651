"""Screenshots made by the app itself: `python -m app.screenshot OUT.png [options]`.

Runs the real window on a throw-away data folder, asks the given questions, and saves the
window (QWidget.grab) while the last answer streams, with token colours on. Works on the
offscreen platform, so it needs no display. The README's screenshot is made with this.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m app.screenshot")
    p.add_argument("out", help="PNG to write (mid-stream)")
    p.add_argument("--final", help="also save the window once the last answer is done")
    p.add_argument("--model", help="target GGUF (default: the starter target)")
    p.add_argument("--draft", help="draft GGUF (default: the starter draft; 'none' for none)")
    p.add_argument("--ask", action="append", help="a question (repeat; the last one is caught streaming)")
    p.add_argument("--at-tokens", type=int, default=120, help="grab the last answer after this many tokens")
    p.add_argument("--max-tokens", type=int, default=400)
    p.add_argument("--mode", default="auto", help="drafter mode: auto, draft, lookup, both, off")
    p.add_argument("--dark", action="store_true", help="dark palette")
    p.add_argument("--no-colours", action="store_true", help="token colours off")
    p.add_argument("--details", action="store_true", help="open the details of the first answer")
    p.add_argument("--size", default="1280x860", help="window size, WxH (logical pixels)")
    p.add_argument("--scale", default="1", help="device pixel ratio (QT_SCALE_FACTOR)")
    args = p.parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ["QT_SCALE_FACTOR"] = args.scale
    home = tempfile.mkdtemp(prefix="specula-shot-")
    os.environ["SPECULA_HOME"] = home

    from PySide6.QtCore import QEventLoop
    from PySide6.QtWidgets import QApplication

    from app.bridge.model_controller import EngineState
    from app.core.settings import ModelSettings, Settings
    from app.core.store import Store
    from app.main_window import MainWindow
    from app.ui import theme
    from engine.models import starter
    from engine.models.library import ModelLibrary

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setStyle("Fusion")
    if args.dark:
        app.setPalette(theme.dark_palette())
    model, draft = args.model, args.draft
    if model is None:
        target_path, draft_path = starter.assemble_pair()
        model, draft = str(target_path), draft or str(draft_path)
    settings = Settings(
        target=ModelSettings(model),
        draft=ModelSettings("" if draft in (None, "none") else draft),
        temperature=0.0,
        max_tokens=args.max_tokens,
        show_token_colours=not args.no_colours,
        drafter_mode=args.mode,
    )
    store = Store()
    window = MainWindow(store, settings, library=ModelLibrary(scan_external=False))
    w, h = (int(v) for v in args.size.split("x"))
    window.resize(w, h)
    window.show()

    def spin(done, timeout=600.0) -> bool:
        end = time.monotonic() + timeout
        while not done() and time.monotonic() < end:
            app.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 30)
            time.sleep(0.005)
        return done()

    if (
        not spin(lambda: window.models.state in (EngineState.READY, EngineState.FAILED))
        or window.models.state == EngineState.FAILED
    ):
        print("the models did not load", file=sys.stderr)
        return 1
    questions = args.ask or ["Write a Python function that checks whether a number is prime."]
    for i, question in enumerate(questions):
        window.send_message(question)
        last = i == len(questions) - 1
        if last:
            spin(lambda: window.answers.active is None or len(window.answers.active.tokens) >= args.at_tokens)
        else:
            spin(lambda: not window.session.busy)
            if args.details and i == 0:
                widget = window.chat_view.message_widget(window.session.messages[-1].id)
                widget.footer.details_button.setChecked(True)
    for _ in range(10):
        app.processEvents()
        time.sleep(0.02)
    window.chat_view.flush()
    app.processEvents()
    window.grab().save(args.out)
    print(f"saved {args.out}")
    if args.final:
        spin(lambda: not window.session.busy)
        for _ in range(10):
            app.processEvents()
        window.grab().save(args.final)
        print(f"saved {args.final}")
    window.close()
    store.close()
    shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
