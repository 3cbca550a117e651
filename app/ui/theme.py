"""Colours and fonts derived from the current palette, so light and dark themes both work.

Nothing here holds state: widgets ask again when they get a PaletteChange event.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QEvent, QObject
from PySide6.QtGui import QColor, QFont, QFontDatabase, QGuiApplication, QIcon, QPalette

from engine.config import DrafterKind, TokenSource

ASSETS = Path(__file__).resolve().parents[2] / "assets"

SOURCE_LABELS = {
    TokenSource.DRAFT_MODEL.value: "draft model",
    TokenSource.LOOKUP.value: "prompt lookup",
    TokenSource.HISTORY.value: "history",
    TokenSource.DOCUMENTS.value: "your documents",
    TokenSource.MTP.value: "MTP head",
    TokenSource.TARGET.value: "target",
}
SOURCE_DESCRIPTIONS = {
    TokenSource.DRAFT_MODEL.value: "Proposed by the draft model and accepted by the target",
    TokenSource.LOOKUP.value: "Copied from earlier text by prompt lookup and accepted by the target",
    TokenSource.HISTORY.value: "Continued from your earlier conversations and accepted by the target",
    TokenSource.DOCUMENTS.value: "Continued from your documents found for this question and accepted by the target",
    TokenSource.MTP.value: "Proposed by the model's own MTP (next-token prediction) head and accepted by the target",
    TokenSource.TARGET.value: "Produced by the target model itself",
}


def dark_palette() -> QPalette:
    """A dark palette for Fusion (screenshots and tests; the app itself follows the system's)."""
    pal = QPalette()
    window, base, text = QColor("#202124"), QColor("#17181a"), QColor("#e8e8e8")
    role = QPalette.ColorRole
    for r, c in (
        (role.Window, window),
        (role.WindowText, text),
        (role.Base, base),
        (role.AlternateBase, QColor("#26272a")),
        (role.Text, text),
        (role.Button, QColor("#2d2e31")),
        (role.ButtonText, text),
        (role.ToolTipBase, QColor("#2d2e31")),
        (role.ToolTipText, text),
        (role.PlaceholderText, QColor("#8a8d91")),
        (role.Highlight, QColor("#3d6fb6")),
        (role.HighlightedText, QColor("#ffffff")),
        (role.Link, QColor("#8ab4f8")),
        (role.Mid, QColor("#3a3b3e")),
        (role.Dark, QColor("#111214")),
        (role.Light, QColor("#3a3b3e")),
    ):
        pal.setColor(r, c)
    pal.setColor(QPalette.ColorGroup.Disabled, role.Text, QColor("#6b6e72"))
    pal.setColor(QPalette.ColorGroup.Disabled, role.ButtonText, QColor("#6b6e72"))
    pal.setColor(QPalette.ColorGroup.Disabled, role.WindowText, QColor("#6b6e72"))
    return pal


def icon() -> QIcon:
    result = QIcon()
    for name in ("icon.svg", "icon.png"):
        path = ASSETS / name
        if path.is_file():
            result.addFile(str(path))
    return result


def palette() -> QPalette:
    return QGuiApplication.palette()


def is_dark(pal: QPalette | None = None) -> bool:
    pal = pal or palette()
    return pal.color(QPalette.ColorRole.Window).lightness() < 128


def mix(a: QColor, b: QColor, t: float) -> QColor:
    """a blended toward b by t (0..1)."""
    return QColor(
        round(a.red() + (b.red() - a.red()) * t),
        round(a.green() + (b.green() - a.green()) * t),
        round(a.blue() + (b.blue() - a.blue()) * t),
    )


def source_colour(source: TokenSource | DrafterKind | str, pal: QPalette | None = None) -> QColor:
    """Strong colour of a token source or a drafter (the two share their values), for charts and swatches."""
    dark = is_dark(pal)
    if source in (TokenSource.DRAFT_MODEL, DrafterKind.DRAFT_MODEL):
        return QColor("#3fbf7f" if dark else "#1e9e5a")
    if source in (TokenSource.LOOKUP, DrafterKind.LOOKUP):
        return QColor("#5aa2ff" if dark else "#2f6fd6")
    if source in (TokenSource.HISTORY, DrafterKind.HISTORY):
        # Amber, toward gold: apart from green, blue, the grey target and the time bar's orange "verifying".
        return QColor("#e6b422" if dark else "#b8860b")
    if source in (TokenSource.DOCUMENTS, DrafterKind.DOCUMENTS):
        return QColor("#f28cb8" if dark else "#c2417a")  # rose: the user's own text
    if source in (TokenSource.MTP, DrafterKind.MTP):
        return QColor("#b48cf2" if dark else "#7b4fc9")  # violet: the model drafting for itself
    pal = pal or palette()
    return mix(pal.color(QPalette.ColorRole.Text), pal.color(QPalette.ColorRole.Base), 0.55)


def token_background(source: str, pal: QPalette | None = None) -> QColor | None:
    """Background behind a token when token colours are on (None: the target's own tokens)."""
    if source == TokenSource.TARGET.value:
        return None
    pal = pal or palette()
    base = pal.color(QPalette.ColorRole.Base)
    return mix(base, source_colour(source, pal), 0.42 if is_dark(pal) else 0.30)


def subtle(pal: QPalette | None = None, t: float = 0.45) -> QColor:
    """Secondary text: the text colour pulled toward the background."""
    pal = pal or palette()
    return mix(pal.color(QPalette.ColorRole.WindowText), pal.color(QPalette.ColorRole.Window), t)


def card(pal: QPalette | None = None, t: float = 0.06) -> QColor:
    """A surface slightly set off from the window (user messages, code blocks)."""
    pal = pal or palette()
    return mix(pal.color(QPalette.ColorRole.Base), pal.color(QPalette.ColorRole.Text), t)


def error_colour(pal: QPalette | None = None) -> QColor:
    return QColor("#ff8a80") if is_dark(pal) else QColor("#b3261e")


def warning_colour(pal: QPalette | None = None) -> QColor:
    return QColor("#f0b35a") if is_dark(pal) else QColor("#9a5b00")


def monospace() -> QFont:
    """The system's fixed-width font, at the app's text size (View → Larger text scales it too)."""
    font = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
    font.setStyleHint(QFont.StyleHint.Monospace)
    if QGuiApplication.font().pointSizeF() > 0:
        font.setPointSizeF(QGuiApplication.font().pointSizeF())
    return font


def css(colour: QColor) -> str:
    return colour.name(QColor.NameFormat.HexArgb if colour.alpha() < 255 else QColor.NameFormat.HexRgb)


class _Tint(QObject):
    """Keeps a widget's text colour derived from the application palette, across theme changes."""

    def __init__(self, widget, colour_of):
        super().__init__(widget)
        self.colour_of = colour_of
        widget.installEventFilter(self)
        self.apply(widget)

    def eventFilter(self, obj, event) -> bool:
        # Children get PaletteChange (not ApplicationPaletteChange) when the theme changes.
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            self.apply(obj)
        return False

    def apply(self, widget) -> None:
        colour = self.colour_of(QGuiApplication.palette())
        pal = widget.palette()
        if pal.color(QPalette.ColorRole.WindowText) != colour:
            pal.setColor(QPalette.ColorRole.WindowText, colour)
            pal.setColor(QPalette.ColorRole.Text, colour)
            widget.setPalette(pal)


def tint(widget, colour_of=None) -> None:
    """Colour a label's text with colour_of(palette) (default: secondary text), now and after theme changes.

    A palette, not a style sheet: a style sheet on a container freezes its children's palettes.
    """
    for child in widget.findChildren(_Tint):
        if child.parent() is widget:
            widget.removeEventFilter(child)
            child.setParent(None)
    _Tint(widget, colour_of or subtle)
