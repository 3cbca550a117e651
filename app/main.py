"""Entry point of the desktop app: `python -m app` (or the `specula` launcher)."""

from __future__ import annotations

import argparse
import logging
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specula", description="Specula: private, offline chat with local models.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log to the terminal, llama.cpp included")
    # Packaging adds its own modes here (for example --self-test MODEL [DRAFT]); each returns an exit code
    # from run_mode() before any window exists.
    return parser


def run_mode(args: argparse.Namespace) -> int | None:
    """Non-interactive modes; None means: start the window."""
    return None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING)
    code = run_mode(args)
    if code is not None:
        return code

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
    return code


if __name__ == "__main__":
    sys.exit(main())
