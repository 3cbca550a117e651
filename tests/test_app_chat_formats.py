"""The app with a base model (Gemma 3 270M: no chat template in its file) and a per-model format override."""
# ruff: noqa: F811  (pytest fixtures imported from tests.app_helpers)

from app.bridge.model_controller import EngineState
from app.core.settings import ModelSettings, Settings
from tests.app_helpers import ask, make_window, smol_settings  # noqa: F401 (a fixture)


def gemma_settings(path: str, **changes) -> Settings:
    return Settings(target=ModelSettings(path), context_size=1024, temperature=0.0, max_tokens=16, **changes)


def notices_about_base_models(window) -> list[str]:
    return [n.text() for n in window.chat_view.notices if "base model" in n.text()]


def test_a_base_model_gets_its_familys_format_and_a_notice_once(qtbot, make_window, gemma3_path):
    window = make_window(gemma_settings(gemma3_path))
    assert window.models.state == EngineState.READY
    qtbot.waitUntil(lambda: window.model_status.chat_format is not None, timeout=10_000)
    assert window.model_status.chat_format.source == "family" and window.model_status.chat_format.base_model
    qtbot.waitUntil(lambda: bool(notices_about_base_models(window)), timeout=5_000)
    (text,) = notices_about_base_models(window)
    assert "Gemma" in text
    assert gemma3_path in window.settings.base_model_notices
    window.close()
    # The next start (settings read back from the data folder) says nothing more.
    again = make_window(None)
    qtbot.waitUntil(lambda: again.model_status.chat_format is not None, timeout=10_000)
    qtbot.wait(200)
    assert notices_about_base_models(again) == []


def test_a_format_chosen_in_settings_is_used_and_remembered_for_that_file(qtbot, make_window, gemma3_path):
    window = make_window(gemma_settings(gemma3_path))
    qtbot.waitUntil(lambda: window.model_status.chat_format is not None, timeout=10_000)
    new = gemma_settings(gemma3_path, chat_templates={gemma3_path: "chatml"})
    window.apply_settings(new)
    qtbot.waitUntil(lambda: window.model_status.chat_format.source == "override", timeout=10_000)
    assert "ChatML" in window.model_status.chat_format.description
    assert window.models.state == EngineState.READY, "a format change does not reload the model"
    assert Settings.load(window.settings_path).chat_templates == {gemma3_path: "chatml"}


def seed_thought(window) -> int:
    """A conversation whose earlier answer thought aloud: SmolLM2 then thinks too (tests/test_reasoning.py)."""
    store = window.store
    conv = store.create_conversation("Sums")
    store.add_message(conv.id, "user", "What is 2+2? Think first.")
    answer = store.add_message(conv.id, "assistant", "The answer is 4.")
    store.finish_message(answer.id, "The answer is 4.", "stop", None, reasoning="I add 2 and 2, which makes 4.")
    window.session.open_conversation(conv.id)
    return conv.id


def test_thinking_streams_open_then_collapses_when_the_answer_starts(qtbot, make_window, smollm2_path):
    window = make_window(smol_settings(smollm2_path, drafter_mode="lookup"))
    seed_thought(window)
    assert window.chat_view.message_widget(window.session.messages[1].id).thinking.collapsed
    seen = []  # (thinking?, section open?) as each token arrives

    def record(_rid, _text, _source, _round, reasoning):
        widget = window.chat_view.message_widget(window.session.messages[-1].id)
        seen.append((reasoning, not widget.thinking.collapsed, widget.thinking.isVisible()))

    window.host.worker.token_received.connect(record)
    message = ask(qtbot, window, "What is 2+2? Think first.")
    widget = window.chat_view.message_widget(message.id)
    assert any(r and open_ and shown for r, open_, shown in seen), "the thinking was shown open while it streamed"
    assert widget.thinking.collapsed and widget.thinking.isVisible()
    assert widget.thinking.toggle.text().startswith("Thought for") and "tokens" in widget.thinking.toggle.text()
    # Stored apart from the answer, and counted in its statistics.
    stored = window.store.message(message.id)
    assert stored.reasoning and "think>" not in stored.reasoning + stored.content
    assert stored.content == widget.body.plain_text() and stored.reasoning not in stored.content
    assert 0 < stored.stats.n_reasoning_tokens < stored.stats.n_tokens
    assert f"({stored.stats.n_reasoning_tokens} thinking)" in " ".join(widget.footer.figure_texts())
    widget.thinking.toggle.click()
    assert not widget.thinking.collapsed and widget.thinking.label.text() == stored.reasoning
    # The setting hides it.
    settings = smol_settings(smollm2_path, drafter_mode="lookup", show_reasoning=False)
    window.apply_settings(settings)
    assert not widget.thinking.isVisible()


def test_settings_chat_tab_remembers_a_format_per_model_file(qtbot, tmp_path, smollm2_path, gemma3_path):
    from app.dialogs.chat_format_settings import CUSTOM
    from app.dialogs.settings_dialog import SettingsDialog
    from engine.models.library import ModelLibrary

    library = ModelLibrary(tmp_path / "models", tmp_path / "library.json", scan_external=False)
    for path in (smollm2_path, gemma3_path):
        library.add_file(path)
    settings = Settings(target=ModelSettings(gemma3_path), chat_templates={smollm2_path: "llama3"})
    dialog = SettingsDialog(settings, library)
    qtbot.addWidget(dialog)
    qtbot.waitUntil(lambda: dialog.models_ready, timeout=30_000)
    tab = dialog.chat_tab
    assert tab.format.currentData() == "" and tab.show_reasoning.isChecked()
    tab.format.setCurrentIndex(tab.format.findData("gemma"))
    # Another model: its own choice shows; a Jinja text of one's own for it.
    dialog.target_combo.setCurrentIndex(dialog.target_combo.findData(smollm2_path))
    assert tab.format.currentData() == "llama3"
    tab.format.setCurrentIndex(tab.format.findData(CUSTOM))
    assert tab.jinja.isVisibleTo(tab)
    tab.jinja.setPlainText("{% for m in messages %}{{ m.content }}{% endfor %}")
    tab.show_reasoning.setChecked(False)
    result = dialog.result_settings()
    assert result.chat_templates == {
        gemma3_path: "gemma",
        smollm2_path: "{% for m in messages %}{{ m.content }}{% endfor %}",
    }
    assert result.show_reasoning is False and result.chat_template() == result.chat_templates[smollm2_path]


def test_exports_keep_the_thinking_apart_from_the_answer():
    import json

    from app.core.export import to_json, to_markdown
    from app.core.store import Conversation, Message

    conv = Conversation(1, "Sums", 0.0, 0.0)
    answer = Message(2, 1, "assistant", "It is 4.", reasoning="2 and 2 make 4.")
    md = to_markdown(conv, [Message(1, 1, "user", "2+2?"), answer])
    assert "<details><summary>Thinking</summary>\n\n2 and 2 make 4.\n\n</details>\n\nIt is 4." in md
    data = json.loads(to_json(conv, [answer]))
    assert data["messages"][0]["reasoning"] == "2 and 2 make 4." and data["messages"][0]["content"] == "It is 4."
