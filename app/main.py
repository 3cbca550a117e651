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
    from PySide6.QtWidgets import QApplication, QMessageBox

    from app import theme
    from app.main_window import MainWindow
    from app.store import Store, StoreError

    QGuiApplication.setHighDpiScaleFactorRoundingPolicy(Qt.HighDpiScaleFactorRoundingPolicy.PassThrough)
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("Specula")
    app.setApplicationDisplayName("Specula")
    app.setOrganizationName("Specula")
    app.setDesktopFileName("specula")
    app.setWindowIcon(theme.icon())
    try:
        store = Store()
    except StoreError as e:
        QMessageBox.critical(None, "Specula cannot open its chats", str(e))
        return 1
    window = MainWindow(store, auto_setup=True)
    window.show()
    code = app.exec()
    window.shutdown()
    store.close()
    if window.host.stuck:
        # The engine thread is still inside a native call that ignored its cancel flag: tearing Qt
        # and Python down around it would crash. The chats and settings are saved; end here.
        logging.shutdown()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
