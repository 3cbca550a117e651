"""The app's look, as the user sets it in View: the system's colours or Specula's light or dark
ones, and the text size relative to the system's.

What the system gave is remembered the first time anything changes, so "System" and "Actual
size" go back to exactly that. Widgets follow by themselves: they restyle on PaletteChange and
FontChange events (app/ui/theme.py)."""

from __future__ import annotations

from PySide6.QtGui import QFont, QPalette
from PySide6.QtWidgets import QApplication, QStyleFactory

from app.ui import theme

TEXT_STEP = 1.1  # each Ctrl+= / Ctrl+- step
TEXT_SCALE_RANGE = (0.7, 2.0)  # as app/core/settings.py's RANGES["text_scale"]


class Appearance:
    def __init__(self, app: QApplication):
        self.app = app
        self._system: tuple[str, QPalette, QFont] | None = None

    def apply(self, theme_name: str, text_scale: float) -> None:
        """Show theme_name ("system", "light" or "dark") at text_scale × the system's font size."""
        if self._system is None:
            if theme_name == "system" and text_scale == 1.0:
                return  # nothing to change; the system's look stays untouched
            self._system = (self.app.style().name(), QPalette(self.app.palette()), QFont(self.app.font()))
        style_name, palette, font = self._system
        if theme_name == "system":
            self.app.setStyle(QStyleFactory.create(style_name) or style_name)
            self.app.setPalette(palette)
        else:
            # Fusion draws every widget from the palette, so a chosen palette looks the same everywhere.
            self.app.setStyle("Fusion")
            self.app.setPalette(theme.dark_palette() if theme_name == "dark" else self.app.style().standardPalette())
        scaled = QFont(font)
        scaled.setPointSizeF(font.pointSizeF() * text_scale)
        self.app.setFont(scaled)


def stepped(text_scale: float, steps: int) -> float:
    """The text scale after steps presses of Larger (positive) or Smaller (negative); 0 resets."""
    value = 1.0 if steps == 0 else text_scale * TEXT_STEP**steps
    low, high = TEXT_SCALE_RANGE
    return round(min(max(value, low), high), 3)
