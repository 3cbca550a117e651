# ruff: noqa: F811  (pytest fixtures imported from tests.app_helpers)
"""The window on the 2026 families: a hybrid Qwen3.5 drafting with its own MTP head, and a model
whose state cannot be kept, through the real app, engine thread and llama.cpp."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from app.core.settings import ModelSettings, Settings
from engine.llama import memory
from tests.app_helpers import ask, make_window  # noqa: F401 (a fixture)
from tests.mtp_fixture import with_mtp_head
from tests.synthetic_models import synthetic

ASK = "tok_5 tok_9 say something long"


def settings(model: str, **changes) -> Settings:
    values = dict(target=ModelSettings(model), context_size=512, temperature=0.0, max_tokens=40)
    values.update(changes)
    return Settings(**values)


@pytest.fixture(scope="module")
def echo_model(tmp_path_factory):
    return str(with_mtp_head(synthetic("qwen35"), tmp_path_factory.mktemp("mtp") / "qwen35-mtp.gguf", predictable=True))


def test_mtp_tokens_are_coloured_and_explained(qtbot, make_window, echo_model):
    window = make_window(settings(echo_model, drafter_mode="mtp", draft_length=4))
    tip = window.status.models.toolTip()
    assert "hybrid: attention + recurrent state" in tip
    answer = ask(qtbot, window, ASK)
    assert answer.finish_reason == "length"
    sources = [t.source for t in answer.tokens]
    assert sources.count("mtp") == answer.stats.n_accepted > 10
    qtbot.keyClick(window.composer.input, Qt.Key.Key_T, Qt.KeyboardModifier.ControlModifier)
    assert "MTP head" in window.header.legend.text()
    widget = window.chat_view.message_widget(answer.id)
    tip = widget.token_tooltip(sources.index("mtp"))
    assert tip.startswith("<b>MTP head</b>") and "MTP head drafted" in tip
    assert any("of drafts accepted" in text for text in widget.footer.figure_texts())


def test_a_model_whose_state_cannot_be_kept_says_why_it_decodes_plainly(qtbot, make_window, monkeypatch):
    monkeypatch.setattr(memory, "DEFAULT_BUDGET_BYTES", 16)  # smaller than any recurrent state
    window = make_window(settings(str(synthetic("mamba2")), drafter_mode="lookup"))
    assert "speculation off" in window.status.models.toolTip().lower()
    answer = ask(qtbot, window, ASK)
    widget = window.chat_view.message_widget(answer.id)
    assert answer.stats.n_drafted == 0
    assert widget.footer.figure_texts()[0] == "plain decoding: speculation off for this model"
    assert "could not be undone" in widget.footer.figure_labels[0].toolTip()
