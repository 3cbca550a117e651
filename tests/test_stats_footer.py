"""The footer's headline says what speculation was worth: in words when nothing was drafted, the
measured figure once Compare has run, the estimate otherwise."""

from app.chat.stats_footer import StatsFooter
from app.core.figures import figures
from engine import AnswerStats, Round

AUTO = {"spec": {"mode": "auto", "draft_length": 0}}
PLAIN_ROUNDS = [Round("none", 0, 0, 0)] * 3


def plain_answer() -> AnswerStats:
    return AnswerStats(n_tokens=3, gen_s=0.3, target_step_s=0.1, rounds=list(PLAIN_ROUNDS))


def drafted_answer() -> AnswerStats:
    return AnswerStats(
        n_tokens=100, n_drafted=80, n_accepted=60, gen_s=2.0, target_step_s=0.03, rounds=[Round("lookup", 4, 4, 3)]
    )


def test_nothing_drafted_reads_as_a_choice_not_as_a_broken_feature(qtbot):
    footer = StatsFooter()
    qtbot.addWidget(footer)
    footer.set_params(AUTO)
    footer.set_stats(plain_answer())
    footer.show()
    first = footer.figure_texts()[0]
    assert first == "plain decoding: drafting would not pay on this machine"
    assert "×" not in " ".join(footer.figure_texts())  # no "≈0.98×" next to it
    assert not footer.chart.isVisible() and not footer.chart_caption.isVisible()
    assert footer.details_button.isVisible()  # the rounds and the time split are still there to read
    off = figures(plain_answer(), {"spec": {"mode": "off"}})[0][0]
    assert off == "plain decoding (speculation off)"
    assert figures(plain_answer(), {"spec": {"mode": "lookup"}})[0][0] == "nothing drafted"


def test_the_measured_figure_replaces_the_estimate_once_compare_has_run(qtbot):
    footer = StatsFooter()
    qtbot.addWidget(footer)
    footer.set_params(AUTO)
    footer.set_stats(drafted_answer())
    footer.show()
    assert footer.figure_texts()[0] == "≈1.50× vs plain (estimate)" and footer.chart.isVisible()
    footer.set_comparison(None, running=True)
    assert footer.figure_texts()[0] == "≈1.50× vs plain (estimate)"
    footer.set_comparison({"measured_speedup": 0.93, "spec_tps": 9.3, "plain_tps": 10.0, "identical": True})
    assert footer.figure_texts()[0] == "0.93× vs plain (measured)"
    assert "≈1.50×" in footer.figure_labels[0].toolTip()  # the estimate is still one hover away
    assert "0.93×" in footer.comparison_label.text()
    footer.set_stats(drafted_answer())  # a later refresh keeps the measurement
    assert footer.figure_texts()[0] == "0.93× vs plain (measured)"


def test_the_share_of_the_answer_drafted_from_documents_is_a_figure_of_its_own(qtbot):
    answer = drafted_answer()
    answer.tokens_by_source = {"documents": 45, "lookup": 15, "target": 40}
    footer = StatsFooter()
    qtbot.addWidget(footer)
    footer.set_params(AUTO)
    footer.set_stats(answer)
    footer.show()
    assert "45% from your documents" in footer.figure_texts()
    label = footer.figure_labels[footer.figure_texts().index("45% from your documents")]
    assert "45 of the answer's 100 tokens" in label.toolTip()
    assert not any("documents" in text for text, _ in figures(drafted_answer(), AUTO))  # none drafted: no figure
