"""What an answer was worth, shown truthfully: the estimate's own arithmetic, and a measured
comparison that survives the user switching conversations while it runs."""
# ruff: noqa: F811  (pytest fixtures imported from tests.app_helpers)

import re
from pathlib import Path

from tests.app_helpers import ask, make_window, smol_settings, wait_answer  # noqa: F401 (a fixture)

README = Path(__file__).resolve().parent.parent / "README.md"
# The README's definition of the estimate (its table of figures under each answer).
METHOD = (
    "what plain decoding would have taken (one single-token step per token, priced from each round's own "
    "measured verification time by this machine's step/batch cost ratio) ÷ the time the tokens took"
)


def test_a_comparison_that_ends_in_another_conversation_is_kept(qtbot, make_window, smollm2_path):
    window = make_window(smol_settings(smollm2_path, max_tokens=48))
    answer = ask(qtbot, window, "List the first ten prime numbers.")
    first = window.conversation.id
    window.chat_view.message_widget(answer.id).footer.compare_button.click()
    assert window.answers.comparing is not None
    window.new_conversation()  # away while the plain rerun runs
    wait_answer(qtbot, window)

    comparison = window.store.message(answer.id).comparison
    assert comparison is not None and comparison["measured_speedup"] > 0 and comparison["plain_tps"] > 0
    window.open_conversation(first)
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
