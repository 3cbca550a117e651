"""Remote engines in the settings: saved by name, address and id (never a key), loaded forgivingly; their
API keys in the system keyring (an in-memory keyring backend plugged in with keyring.set_keyring, as
keyring documents) or, with no keyring, for the session only; and the Remote engines dialog (real
widgets, offscreen) against Specula's own server on loopback (tests/test_remote_servers.py's fixture).
"""

from __future__ import annotations

import json
import os

import keyring
import keyring.backends.fail
import pytest
from keyring.backend import KeyringBackend
from keyring.errors import KeyringLocked, PasswordDeleteError
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

from app.core.api_keys import ApiKeys
from app.core.remote_engines import RemoteEngine
from app.core.settings import Settings
from app.dialogs.remote_engines_dialog import RemoteEnginesDialog, models_line
from app.dialogs.settings_dialog import SettingsDialog
from tests.test_remote_servers import KEY, SPECULA_MODEL, WAIT_S, specula  # noqa: F401 - the server fixture

GPU_BOX = RemoteEngine("GPU box", "http://192.168.1.20:8080/v1", "e1")
LAB = RemoteEngine("Lab", "https://lab.example:8443/v1", "e2")


class MemoryKeyring(KeyringBackend):
    """A keyring that keeps passwords in a dict, for tests."""

    priority = 1

    def __init__(self):
        super().__init__()
        self.passwords: dict[tuple[str, str], str] = {}

    def get_password(self, service, username):
        return self.passwords.get((service, username))

    def set_password(self, service, username, password):
        self.passwords[(service, username)] = password

    def delete_password(self, service, username):
        if self.passwords.pop((service, username), None) is None:
            raise PasswordDeleteError(username)


class LockedKeyring(MemoryKeyring):
    """A keyring that is there but refuses to be used (a locked or broken Secret Service)."""

    def set_password(self, service, username, password):
        raise KeyringLocked(f"cannot store {password}: the collection is locked")


@pytest.fixture
def memory_keyring():
    before = keyring.get_keyring()
    memory = MemoryKeyring()
    keyring.set_keyring(memory)
    try:
        yield memory
    finally:
        keyring.set_keyring(before)


# -- settings.json ----------------------------------------------------------------------------


def test_engines_survive_a_save_and_load_and_are_found_by_id(tmp_path):
    path = tmp_path / "settings.json"
    Settings(remote_engines=[GPU_BOX, LAB]).save(path)
    loaded = Settings.load(path)
    assert loaded.remote_engines == [GPU_BOX, LAB] and list(loaded.load_notices) == []
    assert loaded.remote_engine("e2") == LAB and loaded.remote_engine("gone") is None
    assert json.loads(path.read_text())["remote_engines"][0] == {
        "name": "GPU box",
        "base_url": "http://192.168.1.20:8080/v1",
        "id": "e1",
    }


def test_none_until_the_user_adds_one(tmp_path):
    assert Settings().remote_engines == []
    assert Settings.load(tmp_path / "missing.json").remote_engines == []


def test_a_damaged_entry_is_dropped_with_a_notice_and_the_rest_kept(tmp_path):
    path = tmp_path / "settings.json"
    Settings(remote_engines=[GPU_BOX, LAB]).save(path)
    data = json.loads(path.read_text())
    data["remote_engines"] = [
        data["remote_engines"][0],
        {"name": "Broken", "base_url": "ftp://nowhere", "id": "e3"},
        "not an entry",
        {"name": 7, "base_url": "http://10.0.0.2:8080/v1", "id": "e4"},
        {"name": "Again", "base_url": "http://10.0.0.3/v1", "id": "e1"},
        data["remote_engines"][1],
    ]
    data["temperature"] = 0.3
    path.write_text(json.dumps(data))
    loaded = Settings.load(path)
    assert loaded.remote_engines == [GPU_BOX, LAB] and loaded.temperature == 0.3
    [notice] = loaded.load_notices
    for index in (1, 2, 3, 4):
        assert f"remote_engines[{index}]: left out" in notice
    assert "is not a server address" in notice and "used by an earlier entry" in notice
    assert not loaded.model_choice_lost


def test_remote_engines_that_are_not_a_list_become_none(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"remote_engines": {"name": "x"}}))
    loaded = Settings.load(path)
    assert loaded.remote_engines == [] and "remote_engines:" in loaded.load_notices[0]


# -- API keys ---------------------------------------------------------------------------------


def test_keys_round_trip_through_the_keyring_and_never_reach_settings(memory_keyring, tmp_path):
    keys = ApiKeys()
    assert not keys.session_only and keys.problem == ""
    keys.set("e1", " sk-secret-1 ")
    assert memory_keyring.passwords == {("Specula", "e1"): "sk-secret-1"}
    assert ApiKeys().get("e1") == "sk-secret-1"  # another instance (the next start) finds it
    assert "sk-secret-1" not in repr(keys)
    path = tmp_path / "settings.json"
    Settings(remote_engines=[GPU_BOX]).save(path)
    assert "sk-secret" not in path.read_text()
    keys.delete("e1")
    keys.delete("e1")  # nothing to delete: no error
    assert keys.get("e1") is None and memory_keyring.passwords == {}
    keys.set("e2", "k")
    keys.set("e2", "")  # an emptied key field: no key
    assert keys.get("e2") is None


def test_without_a_keyring_keys_last_the_session(no_keyring):
    keys = ApiKeys()
    assert keys.session_only
    assert keys.problem.startswith("No system keyring was found (")
    assert keys.problem.endswith("the key is kept until Specula closes; you will be asked again next time.")
    keys.set("e1", "sk-session")
    assert keys.get("e1") == "sk-session" and "sk-session" not in repr(keys)
    assert ApiKeys().get("e1") is None  # the next start has no key
    keys.delete("e1")
    assert keys.get("e1") is None


def test_a_failing_keyring_falls_back_to_the_session_without_naming_the_key(caplog):
    keys = ApiKeys(backend=LockedKeyring())
    assert not keys.session_only
    keys.set("e1", "sk-locked-out")
    assert keys.session_only and keys.get("e1") == "sk-locked-out"
    assert keys.problem.startswith("The system keyring could not be used (KeyringLocked")
    assert "sk-locked-out" not in keys.problem and "sk-locked-out" not in caplog.text


# -- the dialog -------------------------------------------------------------------------------


def shoot(dialog, tmp_path, name: str) -> None:
    """Renders the dialog (SPECULA_SHOTS=folder keeps a copy to look at)."""
    for folder in (str(tmp_path), os.environ.get("SPECULA_SHOTS")):
        if folder:
            assert dialog.grab().save(os.path.join(folder, name))


def fill(dialog: RemoteEnginesDialog, qtbot, name: str, url: str, key: str = "") -> None:
    dialog.add_button.click()
    qtbot.keyClicks(dialog.name_edit, name)
    qtbot.keyClicks(dialog.address_edit, url)
    if key:
        qtbot.keyClicks(dialog.key_edit, key)


def check(dialog: RemoteEnginesDialog, qtbot) -> str:
    dialog.check_button.click()
    qtbot.waitUntil(lambda: dialog.check_button.isEnabled(), timeout=WAIT_S * 1000)
    return dialog.check_result.text()


def test_add_an_engine_check_it_and_keep_its_key_in_the_keyring(qtbot, specula, memory_keyring, tmp_path):  # noqa: F811
    _, url = specula
    dialog = RemoteEnginesDialog([], ApiKeys())
    qtbot.addWidget(dialog)
    dialog.show()
    assert dialog.empty_hint.isVisible() and not dialog.form_page.isVisible()
    fill(dialog, qtbot, "This computer", url, KEY)
    assert dialog.address_note.toPlainText() == ""  # loopback: no warning
    assert check(dialog, qtbot) == f"1 model: {SPECULA_MODEL}"
    shoot(dialog, tmp_path, "remote_engines.png")
    dialog.accept()
    [engine] = dialog.engines()
    assert (engine.name, engine.base_url) == ("This computer", url)
    assert memory_keyring.passwords == {("Specula", engine.id): KEY}


def test_a_wrong_key_is_refused_in_words(qtbot, specula, memory_keyring):  # noqa: F811
    _, url = specula
    dialog = RemoteEnginesDialog([], ApiKeys())
    qtbot.addWidget(dialog)
    fill(dialog, qtbot, "Wrong key", url, "not-the-key")
    message = check(dialog, qtbot)
    assert "refused the API key (HTTP 401)" in message and "not-the-key" not in message


def test_a_public_address_is_warned_about_as_it_is_typed(qtbot, memory_keyring, tmp_path):
    dialog = RemoteEnginesDialog([], ApiKeys(), resolve=lambda host, port: [(2, 1, 6, "", ("93.184.215.14", 0))])
    qtbot.addWidget(dialog)
    shoot(dialog, tmp_path, "remote_engines_empty.png")
    fill(dialog, qtbot, "Somewhere", "http://8.8.8.8:8080/v1")
    assert "8.8.8.8 is not on this computer or a private network" in dialog.address_note.toPlainText()
    assert "plain HTTP" in dialog.address_note.toPlainText()
    shoot(dialog, tmp_path, "remote_engines_public.png")
    dialog.address_edit.clear()
    qtbot.keyClicks(dialog.address_edit, "http://192.168.1.20:8080/v1")
    assert dialog.address_note.toPlainText() == ""
    dialog.address_edit.clear()
    qtbot.keyClicks(dialog.address_edit, "https://gpu.example.com/v1")
    assert dialog.address_note.toPlainText() == ""  # a name is looked up when the field is left, not per key
    dialog.address_edit.editingFinished.emit()
    qtbot.waitUntil(lambda: "gpu.example.com is not on this computer" in dialog.address_note.toPlainText())
    assert "plain HTTP" not in dialog.address_note.toPlainText()


def test_edit_and_remove_engines_and_their_keys(qtbot, memory_keyring):
    keys = ApiKeys()
    keys.set("e1", "old-key")
    keys.set("e2", "lab-key")
    dialog = RemoteEnginesDialog([GPU_BOX, LAB], keys)
    qtbot.addWidget(dialog)
    assert dialog.engine_list.count() == 2 and dialog.name_edit.text() == "GPU box"
    assert dialog.key_edit.text() == "old-key"
    dialog.key_edit.clear()
    qtbot.keyClicks(dialog.key_edit, "new-key")
    dialog.engine_list.setCurrentRow(1)
    dialog.remove_button.click()
    dialog.accept()
    assert dialog.engines() == [GPU_BOX]
    assert memory_keyring.passwords == {("Specula", "e1"): "new-key"}


def test_an_unusable_address_keeps_the_dialog_open(qtbot, memory_keyring):
    dialog = RemoteEnginesDialog([], ApiKeys())
    qtbot.addWidget(dialog)
    dialog.show()
    fill(dialog, qtbot, "Typo", "192.168.1.20:8080")
    dialog.buttons.accepted.emit()
    assert dialog.isVisible() and "is not a server address" in dialog.address_note.toPlainText()


def test_without_a_keyring_the_dialog_says_keys_last_the_session(qtbot, no_keyring, tmp_path):
    dialog = RemoteEnginesDialog([GPU_BOX], ApiKeys())
    qtbot.addWidget(dialog)
    dialog.show()
    assert dialog.key_note.isVisible() and dialog.key_note.toPlainText().startswith("No system keyring was found")
    shoot(dialog, tmp_path, "remote_engines_no_keyring.png")


def test_models_line_names_a_few_and_counts_the_rest():
    class M:
        def __init__(self, i):
            self.id = i

    assert models_line([M("a"), M("b"), M("c")]) == "3 models: a, b, c"
    assert models_line([M(str(i)) for i in range(9)]) == "9 models: 0, 1, 2, 3, 4, 5, and 3 more"
    assert models_line([]) == "The server answered but lists no models."


def test_settings_returns_the_engines_added_from_it(qtbot, memory_keyring, tmp_path):
    keys = ApiKeys()
    dialog = SettingsDialog(Settings(remote_engines=[GPU_BOX]), None, api_keys=keys)
    qtbot.addWidget(dialog)
    dialog.show()
    shoot(dialog, tmp_path, "settings_models.png")
    assert "GPU box" in dialog.remote_summary.text()

    def add_lab() -> None:
        remote = QApplication.activeModalWidget()
        assert isinstance(remote, RemoteEnginesDialog)
        fill(remote, qtbot, "Lab", "http://10.0.0.5:8000/v1", "lab-key")
        remote.accept()

    QTimer.singleShot(0, add_lab)
    dialog.remote_button.click()
    engines = dialog.result_settings().remote_engines
    assert [e.name for e in engines] == ["GPU box", "Lab"] and "2 added" in dialog.remote_summary.text()
    assert keys.get(engines[1].id) == "lab-key"
