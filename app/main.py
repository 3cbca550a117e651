"""Entry point of the desktop app: `python -m app` (or the `specula` launcher)."""

from __future__ import annotations

import argparse
import logging
import os
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specula", description="Specula: private, offline chat with local models.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log to the terminal, llama.cpp included")
    parser.add_argument(
        "--self-test", metavar="MODEL [DRAFT]", help="check the install without a window (see app.selftest)"
    )
    return parser


def run_mode(argv: list[str]) -> int | None:
    """Modes without a window, each returning an exit code; None means: start the window."""
    if "--self-test" in argv:
        from app.selftest import main as self_test  # never imports the window modules

        return self_test(argv)
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    code = run_mode(argv)
    if code is not None:
        return code
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING)
    from app.platform_check import check

    # Qt aborts when its platform plugin cannot load: say which packages fix that before it tries.
    if problem := check():
        print(problem, file=sys.stderr)
        return 1

    from PySide6.QtCore import Qt
    from PySide6.QtGui import QGuiApplication
    from PySide6.QtWidgets import QApplication

    from app.ui import theme

    QGuiApplication.setHighDpiScaleFactorRoundingPolicy(Qt.HighDpiScaleFactorRoundingPolicy.PassThrough)
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("Specula")
    app.setApplicationDisplayName("Specula")
    app.setOrganizationName("Specula")
    app.setDesktopFileName("specula")
    app.setWindowIcon(theme.icon())
    from app.single_instance import SingleInstance
    from engine.paths import data_dir

    instance = SingleInstance(data_dir())
    if not instance.claim():
        shown = instance.ask_the_first_to_show()
        print(
            f"Specula is already running with the data folder {data_dir()}: "
            + ("its window was brought forward." if shown else "it does not answer; close it first."),
            file=sys.stderr,
        )
        return 0 if shown else 1
    window = open_window()
    instance.activated.connect(window.bring_forward)
    code = app.exec()
    window.shutdown()
    window.store.close()
    instance.release()
    if window.host.stuck:
        # The engine thread is still inside a native call that ignored its cancel flag: tearing Qt
        # and Python down around it would crash. The chats and settings are saved; end here.
        logging.shutdown()
        os._exit(code)
    return code


def open_window():
    """The main window on the user's chats and settings, shown, with what went wrong opening them.

    A damaged or unwritable chat database or settings file never stops the app: store_open and
    Settings.load set it aside or work around it, and the user is told in one message box.
    """
    from PySide6.QtWidgets import QMessageBox

    from app.core.settings import Settings
    from app.core.store_open import open_chat_store
    from app.main_window import MainWindow

    opened = open_chat_store()
    settings = Settings.load()
    window = MainWindow(opened.store, settings, auto_setup=True)
    window.show()
    notices = [n for n in (opened.notice, *settings.load_notices) if n]
    if notices:
        box = QMessageBox(
            QMessageBox.Icon.Warning, "Specula", "\n\n".join(notices), QMessageBox.StandardButton.Ok, window
        )
        box.setObjectName("start_notice")
        box.open()  # window-modal, and it does not block the event loop
    return window


if __name__ == "__main__":
    sys.exit(main())
