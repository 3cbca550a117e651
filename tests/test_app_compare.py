"""What an answer was worth, shown truthfully: the estimate's own arithmetic, and a measured
comparison that survives the user switching conversations while it runs."""
# ruff: noqa: F811  (pytest fixtures imported from tests.app_helpers)

import re
from pathlib import Path

from tests.app_helpers import ask, make_window, smol_settings, wait_answer, wait_comparison  # noqa: F401 (a fixture)

README = Path(__file__).resolve().parent.parent / "README.md"
# The README's definition of the estimate (its table of figures under each answer).
METHOD = (
    "what plain decoding would have taken (one single-token step per token, priced from each round's own "
    "measured verification time by this machine's step/batch cost ratio, never above what the answer's own plain "
    "steps took, plus what a plain step costs beyond it, as measured: sampling, the text, the window) ÷ the time the "
    "tokens took"
)


def test_a_comparison_that_ends_in_another_conversation_is_kept(qtbot, make_window, smollm2_path):
    window = make_window(smol_settings(smollm2_path, max_tokens=48))
    answer = ask(qtbot, window, "List the first ten prime numbers.")
    first = window.session.conversation.id
    window.chat_view.message_widget(answer.id).footer.compare_button.click()
    assert window.answers.comparing is not None
    window.session.new_conversation()  # away while the plain rerun runs
    wait_comparison(qtbot, window)

    comparison = window.store.message(answer.id).comparison
    assert comparison is not None and comparison["measured_speedup"] > 0 and comparison["plain_tps"] > 0
    window.session.open_conversation(first)
    label = window.chat_view.message_widget(answer.id).footer.comparison_label
    qtbot.waitUntil(label.isVisible)  # shown once the rebuilt chat is laid out
    assert f"Measured against plain decoding: <b>{comparison['measured_speedup']:.2f}×</b>" in label.text()


def test_the_details_show_the_numbers_that_make_the_estimate(qtbot, make_window, smollm2_path):
    # Drafting forced: with nothing drafted the footer says so in words instead of an estimate.
    window = make_window(smol_settings(smollm2_path, max_tokens=48, drafter_mode="draft", draft_length=4))
    answer = ask(qtbot, window, "Write a short poem about the sea.")
    stats = window.store.message(answer.id).stats
    assert stats.plain_estimate_s > 0  # the engine priced every round
    footer = window.chat_view.message_widget(answer.id).footer
    footer.details_button.click()
    text = footer.details.estimate.text()

    m = re.search(r"Plain decoding ≈ ([\d.]+) s \(.*\) ÷ ([\d.]+) s generating = ([\d.]+)×", text)
    assert m, text
    plain, gen, shown = map(float, m.groups())
    assert plain == round(stats.plain_s, 3) and gen == round(stats.gen_s, 3)
    assert abs(plain / gen - shown) < 0.01 + 0.01 * shown  # the arithmetic shown gives the figure shown
    assert footer.figure_texts()[0] == f"≈{m[3]}× vs plain (estimate)"  # the same figure as the footer's

    tip = footer.figure_labels[0].toolTip()
    assert METHOD in tip and METHOD in README.read_text(encoding="utf-8")  # one method, described alike


def test_compare_runs_beside_the_chat_and_shows_the_plain_text_side_by_side(qtbot, make_window, smollm2_path):
    window = make_window(smol_settings(smollm2_path, max_tokens=48))
    answer = ask(qtbot, window, "List the first ten prime numbers.")
    widget = window.chat_view.message_widget(answer.id)
    widget.footer.compare_button.click()
    # The chat is not blocked: the composer offers Send, and the comparison says how to stop it.
    assert window.answers.comparing is not None and not window.session.busy
    assert window.composer.button.text() == "Send" and "go on chatting" in widget.footer.comparison_label.text()
    wait_comparison(qtbot, window)
    comparison = window.store.message(answer.id).comparison
    assert comparison["plain_text"] and comparison["identical"] == (comparison["plain_text"] == answer.content)
    plain = widget.footer.plain_button
    assert plain.isVisible() and not plain.isChecked()
    plain.click()
    panel = widget.plain_panel
    assert panel is not None and panel.isVisible() and panel.body.plain_text() == comparison["plain_text"]
    assert "Plain decoding" in panel.heading.text() and f"{comparison['plain_tokens']} tokens" in panel.heading.text()
    # Beside the answer in a wide window, under it in a narrow one.
    window.resize(1600, 1000)
    qtbot.waitUntil(lambda: panel.x() > widget.body.x() and abs(panel.y() - widget.body.y()) < 5)
    window.resize(700, 600)
    qtbot.waitUntil(lambda: panel.y() > widget.body.y() + widget.body.height() - 1)
    plain.click()
    assert not panel.isVisible()

    # Sending while a comparison runs stops it and answers at once (sent in the same tick: it cannot have ended).
    widget.footer.compare_button.click()
    assert window.answers.comparing is not None
    assert window.send_message("Thanks!")
    assert window.answers.comparing is None and window.answers.active is not None
    assert "Comparison stopped" in window.status.currentMessage()
    wait_answer(qtbot, window)
    assert window.session.messages[-1].role == "assistant" and window.session.messages[-1].complete
    assert window.store.message(answer.id).comparison == comparison  # the earlier measurement is kept


def test_a_sampled_answer_is_compared_with_plain_decoding_at_the_seed_it_was_drawn_with(
    qtbot, make_window, smollm2_path, monkeypatch
):
    # A random seed in the settings: the app draws one for the answer and keeps it, and the comparison reuses it,
    # so plain decoding draws the same tokens wherever lookup's drafts were kept (sampling.Draws).
    window = make_window(smol_settings(smollm2_path, temperature=0.8, seed=-1, max_tokens=32, drafter_mode="lookup"))
    answer = ask(qtbot, window, "Repeat exactly: the cat sat on the mat, the cat sat on the mat.")
    seed = window.store.message(answer.id).stats.seed
    assert isinstance(seed, int)
    asked = []
    host = window.answers.host
    real = host.answer
    monkeypatch.setattr(
        host, "answer", lambda chat, sampling, *a, **k: asked.append(sampling) or real(chat, sampling, *a, **k)
    )
    window.chat_view.message_widget(answer.id).footer.compare_button.click()
    wait_comparison(qtbot, window)
    assert [s.seed for s in asked] == [seed] and asked[0].temperature == 0.8
