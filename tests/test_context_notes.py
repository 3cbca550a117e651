"""When the conversation does not fit the context, the user is told where they look.

The terminal (`python -m engine generate`, `chat`) prints the reason and the flag that changes
it; the app shows a visible line under the answer. SmolLM2, real engine, real subprocesses.
"""
# ruff: noqa: F811  (pytest fixtures imported from tests.app_helpers)

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from app.chat.stats_footer import DetailsPanel, StatsFooter
from engine.config import ChatMessage, ModelSpec, SamplingParams
from engine.decoding.events import DoneEvent, FinishReason
from engine.decoding.stats import AnswerStats

ROOT = Path(__file__).resolve().parents[1]
LONG_PROMPT = "Please summarise the following words. " + "apple banana cherry " * 300


def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "engine", *args], input=stdin, capture_output=True, text=True, env=env, timeout=300
    )


def test_the_engine_names_only_what_exists_and_no_front_end_setting(smollm2_path):
    from engine.decoding.chat_engine import Engine

    engine = Engine(ModelSpec(smollm2_path, n_ctx=512))
    try:
        for messages, system in (
            ([ChatMessage("user", LONG_PROMPT)], False),
            ([ChatMessage("system", "Be brief."), ChatMessage("user", LONG_PROMPT)], True),
        ):
            done = [e for e in engine.chat(messages, SamplingParams(temperature=0.0)) if isinstance(e, DoneEvent)][0]
            assert done.finish_reason == FinishReason.CONTEXT
            assert "context holds 512" in done.error
            assert ("system prompt" in done.error) == system
            assert "Settings" not in done.error
    finally:
        engine.close()


def test_generate_prints_why_in_plain_output_and_the_flag_to_change_it(smollm2_path):
    done = cli("generate", "--model", smollm2_path, "--draft", "none", "--ctx", "512", LONG_PROMPT)
    assert done.returncode == 1
    err = done.stderr
    assert "[context] The message is" in err and "context holds 512" in err
    assert "--ctx" in err and "this run: 512" in err
    assert "0 tokens" not in err  # an empty summary line would only bury the reason
    assert "Settings" not in err and "system prompt" not in err


def test_the_terminal_chat_says_when_old_messages_were_left_out(smollm2_path):
    turns = "".join(f"Question {i}: " + "tell me more about rivers and mountains " * 12 + "\n" for i in range(5))
    done = cli(
        "chat",
        "--model",
        smollm2_path,
        "--draft",
        "none",
        "--ctx",
        "512",
        "--max-tokens",
        "8",
        "--temperature",
        "0",
        stdin=turns + "/quit\n",
    )
    assert done.returncode == 0, done.stderr
    assert "oldest messages were left out of what the model saw" in done.stdout
    assert "--ctx" in done.stdout


def test_the_app_shows_dropped_history_under_the_answer_not_only_in_details(qtbot):
    footer = StatsFooter()
    qtbot.addWidget(footer)
    footer.show()
    footer.set_stats(AnswerStats(n_tokens=5, n_history_dropped=4), "done")
    assert footer.state_label.isVisible()
    assert "The 4 oldest messages were left out" in footer.state_label.text()
    footer.set_stats(AnswerStats(n_tokens=5, n_history_dropped=1), "length")
    text = footer.state_label.text()
    assert "maximum answer length" in text and "The oldest message was left out" in text
    footer.set_stats(AnswerStats(n_tokens=5, n_results_cut=1), "done")
    assert "The middle of a tool's result was left out" in footer.state_label.text()
    details = DetailsPanel()
    qtbot.addWidget(details)
    details.set_stats(AnswerStats(n_tokens=5, n_results_cut=2), {})
    assert "the middle of 2 tool results left out" in details.prompt.text()
    footer.set_stats(AnswerStats(n_tokens=5), "done")
    assert not footer.state_label.isVisible()
    footer.set_stats(AnswerStats(), "context")
    assert "Settings → Context size" in footer.state_label.text()


def test_the_terminal_chat_says_why_an_overlong_message_got_no_answer_and_goes_on(smollm2_path):
    args = ("chat", "--model", smollm2_path, "--draft", "none", "--ctx", "512", "--max-tokens", "8")
    done = cli(*args, "--temperature", "0", stdin=LONG_PROMPT.replace("\n", " ") + "\nSay hi.\n/quit\n")
    assert done.returncode == 0, done.stderr
    assert "[context] The message is" in done.stdout and "--ctx" in done.stdout
    assert "0 tokens" not in done.stderr  # no empty summary under the reason
    # The unanswered message left the conversation: the next one is answered, not refused again.
    assert done.stdout.count("[context]") == 2 and "tok/s" in done.stderr
