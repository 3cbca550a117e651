"""Per-chat choices: system-prompt presets, a chat's own sampling and models, remembered across a restart."""
# ruff: noqa: F811  (pytest fixtures imported from tests.app_helpers)

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

from app.bridge.model_controller import EngineState
from app.core.chat_settings import ChatSettings
from app.core.settings import ModelSettings, Settings
from app.dialogs.chat_settings_dialog import APP_PROMPT, OWN_PROMPT, ChatSettingsDialog
from tests.app_helpers import LOAD_TIMEOUT_MS, ask, make_window, smol_settings  # noqa: F401 (a fixture)


def test_stored_choices_are_read_forgivingly_and_applied_over_the_app_settings(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"x")
    chat = ChatSettings.from_dict(
        {
            "preset": "Concise",
            "system_prompt": "Be brief.",
            "target": str(model),
            "draft": 7,  # not a path: no draft
            "sampling": {"temperature": 9.5, "top_k": 2.5, "seed": -1, "max_tokens": True, "colour": 1},
            "unknown": "ignored",
            "documents_to": ["e1", 3, "", "e1"],  # remote engines its passages may go to: names only, once
        }
    )
    assert chat.system_prompt == "Be brief." and chat.draft == "" and chat.documents_to == ["e1"]
    assert chat.sampling == {"temperature": 2.0, "seed": -1}  # clamped; a fraction, a bool and a stranger dropped
    app = Settings(system_prompt="App prompt", temperature=0.7, target=ModelSettings("/a.gguf"))
    applied = chat.applied_to(app)
    assert (applied.system_prompt, applied.temperature, applied.seed) == ("Be brief.", 2.0, -1)
    assert applied.target.path == str(model) and applied.draft.path == ""
    assert app.system_prompt == "App prompt" and app.target.path == "/a.gguf"  # the app's are untouched
    assert ChatSettings.from_dict(chat.to_dict()) == chat
    assert ChatSettings.from_dict("not a dict").is_default and ChatSettings().to_dict() == {}
    # A model file that is gone is not used, and is named.
    model.unlink()
    assert chat.applied_to(app).target.path == "/a.gguf" and chat.missing_model() == str(model)


def test_presets_are_created_edited_deleted_and_picked_in_the_dialog(qtbot):
    settings = Settings(system_prompt="You are Specula.", temperature=0.7)
    dialog = ChatSettingsDialog(ChatSettings(), settings, "Soup")
    qtbot.addWidget(dialog)
    assert dialog.preset_combo.currentText() == APP_PROMPT and dialog.prompt_edit.isReadOnly()
    assert dialog.prompt_edit.toPlainText() == "You are Specula."
    assert dialog.result_chat().is_default  # nothing chosen: the chat follows Settings
    # Pick a preset: its text, editable; editing it makes the text this chat's own.
    dialog.pick("Concise")
    assert dialog.prompt_edit.toPlainText() == settings.presets["Concise"] and not dialog.prompt_edit.isReadOnly()
    assert dialog.result_chat().preset == "Concise"
    dialog.prompt_edit.setPlainText("Answer like a pirate.")
    assert dialog.preset_combo.currentText() == OWN_PROMPT
    # Save it as a new preset, then update it under the same name.
    assert dialog.save_preset("Pirate")
    assert dialog.preset_combo.currentText() == "Pirate" and dialog.presets["Pirate"] == "Answer like a pirate."
    dialog.prompt_edit.setPlainText("Answer like a pirate, briefly.")
    assert dialog.save_preset("Pirate") and dialog.presets["Pirate"] == "Answer like a pirate, briefly."
    assert list(dialog.presets).count("Pirate") == 1
    # Delete a preset: the text stays this chat's own.
    dialog.pick("Teacher")
    dialog.delete_preset()
    assert "Teacher" not in dialog.presets and dialog.preset_combo.currentText() == OWN_PROMPT
    assert dialog.result_chat().system_prompt == settings.presets["Teacher"]
    assert "Teacher" in settings.presets  # the app's list changes only when the window applies the dialog
    # Sampling: unticked rows show the app's value; a ticked one is this chat's.
    assert not dialog.spins["temperature"].isEnabled() and dialog.spins["temperature"].value() == 0.7
    dialog.own["temperature"].setChecked(True)
    dialog.spins["temperature"].setValue(0.2)
    dialog.own["seed"].setChecked(True)
    assert dialog.spins["seed"].text() == "random"
    assert dialog.result_chat().sampling == {"temperature": 0.2, "seed": -1}
    dialog.reset()
    assert dialog.result_chat().is_default


def _drive_dialog(window, act) -> None:
    """Open This chat, let act change the dialog, press OK (as a user would, through the modal dialog)."""

    def run() -> None:
        dialog = QApplication.activeModalWidget()
        assert isinstance(dialog, ChatSettingsDialog)
        act(dialog)
        dialog.accept()

    QTimer.singleShot(0, run)
    window.open_chat_settings()


def test_a_chat_s_preset_and_sampling_are_used_and_survive_a_restart(qtbot, make_window, smollm2_path):
    window = make_window(smol_settings(smollm2_path, max_tokens=16, temperature=0.0))

    def choose(dialog):
        dialog.pick("Concise")
        dialog.own["temperature"].setChecked(True)
        dialog.spins["temperature"].setValue(0.9)
        dialog.own["max_tokens"].setChecked(True)
        dialog.spins["max_tokens"].setValue(8)
        dialog.prompt_edit.setPlainText("Reply in French.")
        dialog.save_preset("French")

    _drive_dialog(window, choose)  # before the first message: the new chat starts with it
    assert window.chat_settings_button.text() == "This chat ●"
    assert "Preset: French" in window.chat_settings_button.toolTip()
    answer = ask(qtbot, window, "Say hello.")
    assert answer.params["system_prompt"] == "Reply in French."
    assert answer.params["sampling"]["temperature"] == 0.9 and answer.params["sampling"]["max_tokens"] == 8
    assert answer.stats.n_tokens <= 8
    assert window.settings.temperature == 0.0 and window.settings.system_prompt == ""  # the app's are untouched
    chat_id = window.session.conversation.id

    # Another chat follows the app's settings.
    window.session.new_conversation()
    assert window.chat_settings_button.text() == "This chat"
    plain = ask(qtbot, window, "Say hello.")
    assert plain.params["system_prompt"] == "" and plain.params["sampling"]["temperature"] == 0.0
    window.close()

    again = make_window()  # a restart: the settings and the chats as the data folder holds them
    assert again.settings.presets["French"] == "Reply in French."
    again.session.open_conversation(chat_id)
    chat = again.session.chat_settings
    assert chat.preset == "French" and chat.sampling == {"temperature": 0.9, "max_tokens": 8}
    assert again.chat_settings_button.text() == "This chat ●"
    assert again.session.effective_settings().system_prompt == "Reply in French."


def test_a_chat_remembers_its_model_and_switching_chats_loads_it(qtbot, make_window, smollm2_path, gemma3_path):
    window = make_window(smol_settings(smollm2_path, draft=ModelSettings(""), max_tokens=8))
    smol_answer = ask(qtbot, window, "Hi")
    smol_chat, smol_name = window.session.conversation.id, smol_answer.params["target"]

    window.session.new_conversation()
    assert window.add_model_file(gemma3_path)  # chosen in the new chat: it starts with this model
    qtbot.waitUntil(
        lambda: window.models.state == EngineState.READY and window.models.loaded_paths[0] == gemma3_path,
        timeout=LOAD_TIMEOUT_MS,
    )
    gemma_answer = ask(qtbot, window, "Hi")
    gemma_chat = window.session.conversation.id
    assert gemma_answer.params["target"] != smol_name
    assert window.session.chat_settings.target == gemma3_path

    # Back to the first chat: it chose nothing, so it follows the app's default, which is now Gemma.
    window.session.open_conversation(smol_chat)
    assert window.models.loaded_paths[0] == gemma3_path
    # Choose SmolLM2 there: remembered by that chat; the Gemma chat keeps Gemma.
    window.session.choose_models(smollm2_path, "")
    window.load_models()
    qtbot.waitUntil(lambda: window.models.state == EngineState.READY, timeout=LOAD_TIMEOUT_MS)
    window.session.open_conversation(gemma_chat)
    qtbot.waitUntil(
        lambda: window.models.state == EngineState.READY and window.models.loaded_paths[0] == gemma3_path,
        timeout=LOAD_TIMEOUT_MS,
    )
    assert window.header.model_picker.target_path == gemma3_path
    window.close()

    # After a restart, sending in the SmolLM2 chat loads its model first, then answers with it.
    again = make_window()  # loads the app's default: SmolLM2, the last choice
    again.session.open_conversation(gemma_chat)
    qtbot.waitUntil(lambda: again.models.loaded_paths[0] == gemma3_path, timeout=LOAD_TIMEOUT_MS)
    again.session.open_conversation(smol_chat)
    answer = ask(qtbot, again, "Bye")
    assert answer.params["target"] == smol_name and again.models.loaded_paths[0] == smollm2_path

    # Regenerating while other models load: the new answer waits for its chat's model, and Stop
    # while it waits brings the answer it would have replaced back.
    again.session.open_conversation(gemma_chat)
    assert again.models.state == EngineState.LOADING
    again.session.open_conversation(smol_chat)
    last = again.session.messages[-1]
    again.session.regenerate(last.id)
    assert again.session.busy and again.composer.button.text() == "Stop" and last.id not in again.chat_view.widgets
    again.session.stop()
    assert not again.session.busy and again.session.messages[-1].id == last.id and last.id in again.chat_view.widgets
    assert again.store.messages(smol_chat)[-1].id == last.id
