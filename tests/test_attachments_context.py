"""Attachments (read, refused, stored, quoted, shown, exported) and the context meter (exact counts from
the engine thread, the overflow warning), on real widgets and a real SmolLM2 engine."""
# ruff: noqa: F811  (pytest fixtures imported from tests.app_helpers)

from __future__ import annotations

import json

import pytest

from app.bridge.answer_controller import chat_messages
from app.core import attachments as files
from app.core.attachments import Attachment, AttachmentError, prompt_text
from app.core.export import to_json, to_markdown
from app.core.store import Store
from engine.config import ChatMessage
from tests.app_helpers import ANSWER_TIMEOUT_MS, ask, make_window, smol_settings  # noqa: F401 (a fixture)
from tests.pdf_files import make_pdf

COUNT_TIMEOUT_MS = 30_000


@pytest.fixture
def sample_files(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("Buy milk.\nCall Ada about the ```fenced``` plan.\n")
    code = tmp_path / "fib.py"
    code.write_text("def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n")
    pdf = tmp_path / "report.pdf"
    make_pdf(pdf, "Quarterly widgets rose by 42 percent")
    binary = tmp_path / "photo.png"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR" + bytes(range(256)))
    big = tmp_path / "huge.log"
    big.write_text("x" * (files.MAX_FILE_BYTES + 1))
    return dict(notes=notes, code=code, pdf=pdf, binary=binary, big=big)


def test_text_code_and_pdf_files_are_read_and_quoted_with_their_names(sample_files):
    notes, code, pdf = (files.read(sample_files[k]) for k in ("notes", "code", "pdf"))
    assert pdf.kind == "pdf" and "Quarterly widgets rose by 42 percent" in pdf.text
    assert code.quoted().startswith("File: fib.py\n```python\ndef fib(n):")
    # The note contains a fence of its own: the quote's fence is longer, so the note cannot close it.
    assert notes.quoted().startswith("File: notes.txt\n````\n") and notes.quoted().endswith("\n````")
    text = prompt_text("Summarise these.", [notes, pdf])
    assert text.index("File: notes.txt") < text.index("File: report.pdf") < text.index("Summarise these.")


def test_word_opendocument_and_e_book_files_are_attached_as_markdown(tmp_path):
    from tests.test_docx import make_report
    from tests.test_epub import make_book
    from tests.test_odt import make_odt

    word = files.read(make_report(tmp_path / "report.docx"))
    odt = files.read(make_odt(tmp_path / "harvest.odt"))
    book = files.read(make_book(tmp_path / "keeper.epub"))
    assert {word.kind, odt.kind, book.kind} == {"document"}
    assert word.text.startswith("# Field report\n\n## Water supply") and "| Pump repair | 420 EUR |" in word.text
    assert odt.text.startswith("# Harvest notes") and "- Store the russets cold" in odt.text
    assert book.text.index("# Arrival") < book.text.index("# The Lighthouse")
    assert word.quoted().startswith("File: report.docx\n```\n# Field report")  # no language: it is prose
    locked = make_odt(tmp_path / "locked.odt", encrypted=True)
    with pytest.raises(AttachmentError, match="locked.odt: password-protected"):
        files.read(locked)


def test_binary_and_oversized_files_are_refused_with_a_reason(sample_files):
    with pytest.raises(AttachmentError, match="photo.png is a binary file"):
        files.read(sample_files["binary"])
    with pytest.raises(AttachmentError, match=r"huge.log is 2.0 MB; files up to 2.0 MB"):
        files.read(sample_files["big"])
    not_pdf = sample_files["notes"].with_name("fake.pdf")
    not_pdf.write_text("not a pdf at all")
    with pytest.raises(AttachmentError, match="fake.pdf is not a readable PDF"):
        files.read(not_pdf)
    old_word = sample_files["notes"].with_name("minutes.doc")
    old_word.write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(500))  # said what to do, not "binary"
    with pytest.raises(AttachmentError, match=r"minutes.doc is an old Word document: save a copy as \.docx"):
        files.read(old_word)


def test_attachments_are_stored_survive_reopening_and_are_exported(tmp_path, sample_files):
    path = tmp_path / "chats.sqlite3"
    store = Store(path)
    conv = store.create_conversation("files")
    attached = [files.read(sample_files["code"]), files.read(sample_files["pdf"])]
    store.add_message(conv.id, "user", "What does fib do?", attachments=attached)
    store.add_message(conv.id, "assistant", "It recurses.")
    store.close()
    store = Store(path)
    user, answer = store.messages(conv.id)
    assert user.attachments == attached and answer.attachments == []
    markdown, data = to_markdown(conv, [user, answer]), json.loads(to_json(conv, [user, answer]))
    assert "<summary>Attached: fib.py</summary>" in markdown and "```python\ndef fib(n):" in markdown
    assert [a["name"] for a in data["messages"][0]["attachments"]] == ["fib.py", "report.pdf"]
    store.set_attachments(user.id, attached[:1])
    assert store.message(user.id).attachments == attached[:1]
    store.close()


def _count(qtbot, window):
    with qtbot.waitSignal(window.context.counted, timeout=COUNT_TIMEOUT_MS) as blocker:
        window.context.count_now()
    return blocker.args[0]


def test_the_meter_counts_exactly_what_the_engine_would_read_draft_and_attachments_included(
    qtbot, make_window, smollm2_path, small_engine, sample_files
):
    window = make_window(smol_settings(smollm2_path, system_prompt="Be brief."))
    ask(qtbot, window, "Name a colour.")
    code = files.read(sample_files["code"])
    window.composer.set_text("And explain this:")
    window.composer.attach_files([str(sample_files["code"])])
    count = _count(qtbot, window)
    expected = small_engine.prompt_tokens(
        chat_messages(window.session.messages, "Be brief.")
        + [ChatMessage("user", prompt_text("And explain this:", [code]))]
    )
    assert count.n_tokens == len(expected) and count.n_ctx == 2048
    assert window.composer.meter.label.text() == f"{len(expected):,} / 2,048 tokens"
    assert not window.composer.meter.warning.isVisible()
    # Typing counts again by itself (after the pause), with the new text.
    with qtbot.waitSignal(window.context.counted, timeout=COUNT_TIMEOUT_MS) as blocker:
        qtbot.keyClicks(window.composer.input, " Please.")
    assert blocker.args[0].n_tokens > count.n_tokens


def test_the_overflow_warning_names_the_messages_sending_would_leave_out(qtbot, make_window, smollm2_path):
    window = make_window(smol_settings(smollm2_path, context_size=512, max_tokens=16))
    ask(qtbot, window, "Tell me about otters.")
    ask(qtbot, window, "And beavers?")
    assert _count(qtbot, window).n_dropped == 0 and not window.composer.meter.warning.isVisible()
    window.composer.set_text("Summarise: " + "the river runs past the old mill and on to the sea. " * 33)
    count = _count(qtbot, window)
    assert count.n_dropped >= 1 and count.n_tokens + count.room > 512
    warning = window.composer.meter.warning
    assert warning.isVisible() and "Over the context" in warning.text() and "“Tell me about otters.”" in warning.text()
    # A message that cannot fit even alone says so before it is sent.
    window.composer.set_text("word " * 600)
    assert _count(qtbot, window).too_long
    assert warning.text().startswith("Too long to send:")


def test_the_overflow_warning_counts_an_answer_that_called_tools_as_one_message():
    """The engine drops messages as the model is sent them: an answer that called tools twice is five
    (call, result, call, result, the text after). The warning names stored messages, as the chat shows them."""
    from app.bridge.context_counter import overflow_warning
    from app.bridge.worker import TokenCount
    from app.core.store import Message, Role
    from app.core.tool_steps import ToolStatus, ToolUse

    uses = [
        ToolUse(f"call_{i}", "read_file", {"path": "GPL-3"}, "files", step=i, status=ToolStatus.DONE, result="text")
        for i in range(2)
    ]
    stored = [
        Message(1, 1, Role.USER, "Read GPL-3 and give its title."),
        Message(2, 1, Role.ASSISTANT, "It is the GNU GPL.", tool_uses=uses),
        Message(3, 1, Role.USER, "And its version?"),
    ]
    sent = chat_messages(stored, "")
    assert len(sent) == 7  # the question, 2 × (call, result), the text after, the new question
    warning = overflow_warning(TokenCount(1, 5000, 4096, 1024, n_dropped=6), stored)
    assert "the 2 oldest messages" in warning and "to “It is the GNU GPL.”" in warning
    assert "version" not in warning
    answer_only_calls = [stored[0], Message(2, 1, Role.ASSISTANT, "", tool_uses=uses), stored[2]]
    warning = overflow_warning(TokenCount(1, 5000, 4096, 1024, n_dropped=5), answer_only_calls)
    assert "to “read_file call”" in warning
    warning = overflow_warning(TokenCount(1, 5000, 4096, 1024, n_results_cut=2), stored)
    assert warning.startswith("Over the context: sending this leaves the middle of 2 tool results out of")
    # The line under an answer counts them the same way.
    from app.bridge.answer_controller import in_stored_messages
    from engine import AnswerStats, DoneEvent, FinishReason

    done = DoneEvent(FinishReason.STOP, AnswerStats(n_history_dropped=6), "Version 3.")
    assert in_stored_messages(done, stored).stats.n_history_dropped == 2


def test_attached_files_reach_the_engine_show_as_chips_and_come_back_after_a_restart(
    qtbot, make_window, smollm2_path, sample_files
):
    settings = smol_settings(smollm2_path)
    settings.save()
    window = make_window(settings)
    composer = window.composer
    refused = composer.attach_files([str(sample_files[k]) for k in ("notes", "binary", "pdf", "big")])
    assert (
        len(refused) == 2 and composer.refusal.isVisible() and "photo.png is a binary file" in composer.refusal.text()
    )
    assert [c.attachment.name for c in composer.chips.chips] == ["notes.txt", "report.pdf"]
    composer.chips.chips[0].remove_button.click()  # removed before sending
    composer.attach_files([str(sample_files["code"])])
    assert [c.attachment.name for c in composer.chips.chips] == ["report.pdf", "fib.py"]
    sent, answer = [], window.host.answer  # the requests the engine thread is asked to answer
    window.host.answer = lambda *args, **kwargs: sent.append(answer(*args, **kwargs)) or sent[-1]
    ask(qtbot, window, "What do these say?", wait=False)
    qtbot.waitUntil(lambda: bool(sent), timeout=ANSWER_TIMEOUT_MS)
    prompt = sent[0].messages[-1].content
    assert "File: report.pdf" in prompt and "Quarterly widgets rose by 42 percent" in prompt
    assert "File: fib.py\n```python\ndef fib(n):" in prompt and prompt.endswith("What do these say?")
    qtbot.waitUntil(lambda: not window.session.busy, timeout=ANSWER_TIMEOUT_MS)
    assert composer.attachments == [] and not composer.chips.isVisible() and not composer.refusal.isVisible()
    user = window.session.messages[-2]
    chips = window.chat_view.message_widget(user.id).attachment_chips
    assert [c.attachment.name for c in chips.chips] == ["report.pdf", "fib.py"] and all(
        c.remove_button is None for c in chips.chips
    )
    window.close()

    again = make_window(None)
    again.session.open_conversation(window.session.conversation.id)
    restored = again.session.messages[-2]
    assert [a.name for a in restored.attachments] == ["report.pdf", "fib.py"]
    assert "Quarterly widgets" in restored.attachments[0].text
    assert [c.attachment.name for c in again.chat_view.message_widget(restored.id).attachment_chips.chips] == [
        "report.pdf",
        "fib.py",
    ]
    # Editing the message brings its files back into the composer as removable chips.
    again.edit_message(restored.id)
    assert [a.name for a in again.composer.attachments] == ["report.pdf", "fib.py"]


def test_the_meter_says_when_no_model_is_loaded(qtbot, make_window, isolated_home):
    window = make_window(smol_settings(""), wait=False)
    count = _count(qtbot, window)
    assert count.n_ctx == 0 and window.composer.meter.label.text() == "No model loaded"


def test_the_meter_says_counting_from_a_load_until_its_count_comes(qtbot):
    """A question sent as soon as the model loads keeps the engine busy: the meter must not go on
    saying that no model is loaded while the count waits for the answer to end."""
    from app.bridge.context_counter import ContextCounter
    from app.bridge.worker import TokenCount
    from app.chat.context_meter import ContextMeter
    from tests.fake_host import FakeEngineHost

    host, meter, remote = FakeEngineHost(), ContextMeter(), [""]
    qtbot.addWidget(meter)
    counter = ContextCounter(host, meter, lambda: ([], "", 64), lambda: ("", [], None), remote=lambda: remote[0])
    assert meter.label.text() == "No model loaded"
    host.worker.chat_format_known.emit(None)  # the load ended
    assert meter.label.text() == "Counting tokens…"
    counter.count_now()
    host.worker.tokens_counted.emit(TokenCount(0, n_tokens=12, n_ctx=2048, room=64))  # the fake asks as id 0
    assert meter.label.text() == "12 / 2,048 tokens"
    meter.set_warning("Too long to send: …")  # counted for the model before a reload
    host.worker.chat_format_known.emit(None)
    assert meter.label.text() == "Counting tokens…" and meter.warning.isHidden()
    counter.count_now()
    host.worker.tokens_counted.emit(TokenCount(0, n_tokens=12, n_ctx=2048, room=64))
    remote[0] = "example.org"  # a remote chat's context is the server's: nothing is counted here
    host.worker.chat_format_known.emit(None)
    assert meter.label.text() == "12 / 2,048 tokens"
    counter.count_now()
    assert meter.label.text() == "Context: example.org's"


def test_an_attachment_round_trips_through_its_dict():
    a = Attachment("a.md", "# hi", "text", 4)
    assert Attachment.from_dict(a.to_dict()) == a and a.label() == "a.md · 4 B"


def test_files_dropped_or_pasted_on_the_composer_are_attached_not_typed(qtbot, sample_files):
    from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
    from PySide6.QtGui import QDropEvent

    from app.chat.composer import Composer

    composer = Composer()
    qtbot.addWidget(composer)
    composer.show()
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(sample_files["code"]))])
    assert composer.input.canInsertFromMimeData(mime)
    composer.input.insertFromMimeData(mime)  # what a paste or a drop on the text box does
    assert composer.text() == "" and [a.name for a in composer.attachments] == ["fib.py"]
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(sample_files["binary"])), QUrl.fromLocalFile(str(sample_files["pdf"]))])
    drop = QDropEvent(QPointF(5, 5), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier(0))
    composer.dropEvent(drop)  # a drop beside the box, on the composer
    assert [a.name for a in composer.attachments] == ["fib.py", "report.pdf"]
    assert "photo.png is a binary file" in composer.refusal.text()
    with qtbot.waitSignal(composer.send_requested) as sent:  # files alone can be sent
        qtbot.keyClick(composer.input, Qt.Key.Key_Return)
    assert sent.args == [""]


def test_a_long_count_gives_up_width_rather_than_widen_the_window(qtbot):
    from app.bridge.worker import TokenCount
    from app.chat.context_meter import ContextMeter

    meter = ContextMeter()
    qtbot.addWidget(meter)
    meter.show_count(TokenCount(1, 31_760, 131_072, 8_192, n_documents=21_149, n_tools=3_573), "")
    full = meter.label.fontMetrics().horizontalAdvance(meter.label.text())
    assert "(21,149 from your documents)" in meter.label.text()
    assert meter.minimumSizeHint().width() < full  # elided when the window is narrow
    assert "21,149 of them are passages" in meter.toolTip() and "3,573 describe the tools" in meter.toolTip()
