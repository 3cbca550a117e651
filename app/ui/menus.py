"""The window's menu bar: every command with its shortcut, wired to the window's methods."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QActionGroup, QKeySequence


@dataclass
class MenuActions:
    """The actions the window changes later (a theme chosen elsewhere is checked here)."""

    stop: QAction
    colours: QAction
    themes: dict[str, QAction]
    larger_text: QAction
    actual_size: QAction
    download: QAction


def build_menus(window) -> MenuActions:
    """File, Edit, View, Settings and Help for window (a MainWindow), each command wired to the
    window or its chat session."""
    session = window.session

    def action(menu, text, slot, shortcut=None, tip=None) -> QAction:
        act = QAction(text, window)
        if shortcut:
            act.setShortcut(QKeySequence(shortcut))
        if tip:
            act.setToolTip(tip)
            act.setStatusTip(tip)
        act.triggered.connect(slot)
        menu.addAction(act)
        return act

    bar = window.menuBar()
    file = bar.addMenu("&File")
    action(file, "&New chat", session.new_conversation, QKeySequence.StandardKey.New)
    action(file, "&Export chat as Markdown…", lambda: window.export_conversation(None, "markdown"), "Ctrl+E")
    action(file, "Export chat as &JSON…", lambda: window.export_conversation(None, "json"), "Ctrl+Shift+E")
    file.addSeparator()
    action(file, "Model &library…", window.open_library, "Ctrl+Shift+L", "Every GGUF model on this computer")
    action(file, "&Add GGUF model…", window.add_model_dialog)
    download = action(file, "&Download models…", window.open_downloader)
    action(file, "&Documents…", window.open_documents, tip="Your document collections, which chats can answer from")
    action(file, "Local &server…", window.open_server_panel, tip="Serve the loaded model to programs on this computer")
    file.addSeparator()
    action(file, "&Quit", window.close, QKeySequence.StandardKey.Quit)

    edit = bar.addMenu("&Edit")
    stop = action(edit, "&Stop answer", window.stop_or_cancel, "Esc")
    stop.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
    action(edit, "&Regenerate last answer", session.regenerate_last, "Ctrl+R")
    action(edit, "&Edit last message", window.edit_last, "Ctrl+Up")
    action(edit, "&Copy last answer", window.copy_last_answer, "Ctrl+Shift+C")
    action(edit, "&Find chat", window.sidebar.focus_search, QKeySequence.StandardKey.Find)
    action(edit, "Rename chat", window.sidebar.rename_current, "F2")
    action(edit, "Focus the message box", lambda: window.composer.input.setFocus(), "Ctrl+L")

    view = bar.addMenu("&View")
    colours = QAction("&Token colours", window)
    colours.setCheckable(True)
    colours.setShortcut(QKeySequence("Ctrl+T"))
    colours.setChecked(window.header.colours_button.isChecked())
    colours.toggled.connect(window.header.colours_button.setChecked)
    window.header.colours_button.toggled.connect(colours.setChecked)
    view.addAction(colours)
    view.addSeparator()
    theme_menu = view.addMenu("T&heme")
    themes: dict[str, QAction] = {}
    group = QActionGroup(window)
    for name, label in (("system", "&System"), ("light", "&Light"), ("dark", "&Dark")):
        act = theme_menu.addAction(label, lambda name=name: window.set_appearance(theme_name=name))
        act.setCheckable(True)
        act.setChecked(name == window.settings.theme)
        group.addAction(act)
        themes[name] = act
    larger_text = action(view, "&Larger text", lambda: window.step_text(1), "Ctrl+=")
    window.addAction(shortcut_action(window, "Ctrl++", lambda: window.step_text(1)))
    action(view, "&Smaller text", lambda: window.step_text(-1), "Ctrl+-")
    actual_size = action(view, "&Actual text size", lambda: window.step_text(0), "Ctrl+0")

    settings = bar.addMenu("&Settings")
    action(settings, "&Preferences…", window.open_settings, QKeySequence.StandardKey.Preferences)
    action(
        settings,
        "&This chat…",
        window.open_chat_settings,
        "Ctrl+Shift+,",
        "This chat's system prompt, preset and sampling",
    )
    action(settings, "&MCP servers…", window.open_mcp_servers, tip="The programs and servers that give chats tools")
    # Not every platform defines a Preferences key; Ctrl+, everywhere.
    window.addAction(shortcut_action(window, "Ctrl+,", window.open_settings))

    help_menu = bar.addMenu("&Help")
    action(help_menu, "&About Specula", window.about)
    return MenuActions(stop, colours, themes, larger_text, actual_size, download)


def shortcut_action(parent, shortcut: str, slot) -> QAction:
    """A shortcut with no menu entry (a second key for a command, or one no platform names)."""
    act = QAction(parent)
    act.setShortcut(QKeySequence(shortcut))
    act.triggered.connect(slot)
    return act
