"""Specula's desktop app (PySide6). The engine never imports this package."""

from app import qt_compat

# Before any widget exists: PySide6 6.12.0 on Python < 3.12 leaks references to None and True.
qt_compat.guard()
