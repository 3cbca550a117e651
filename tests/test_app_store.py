"""The app's data layer without Qt: the SQLite store, streaming writes, settings, export."""

import json
import sqlite3

import pytest

from app.core import store as store_module
from app.core.answers import AnswerRecorder, answer_params, sampling_from_params
from app.core.export import to_json, to_markdown
from app.core.settings import ModelSettings, Settings
from app.core.store import SCHEMA_VERSION, Store, StoreError, Token, history, title_from
from engine.config import DrafterKind, DrafterMode, SamplingParams, SpecParams
from engine.decoding.events import DoneEvent, FinishReason, RoundEvent
from engine.decoding.stats import AnswerStats, Round


@pytest.fixture
def db(tmp_path):
    s = Store(tmp_path / "chats.sqlite3")
    yield s
    s.close()


def test_new_database_is_at_the_current_schema_version(db):
    assert db.version() == SCHEMA_VERSION
    tables = {r[0] for r in db.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"schema_version", "conversations", "messages", "tokens"} <= tables


def test_migrations_run_once_and_later_migrations_upgrade_old_databases(tmp_path, monkeypatch):
    path = tmp_path / "chats.sqlite3"
    Store(path).close()
    extra = ["ALTER TABLE conversations ADD COLUMN colour TEXT"]  # a migration still to come
    monkeypatch.setattr(store_module, "MIGRATIONS", [*store_module.MIGRATIONS, extra])
    monkeypatch.setattr(store_module, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    s = Store(path)
    try:
        assert s.version() == SCHEMA_VERSION + 1
        columns = {r[1] for r in s.db.execute("PRAGMA table_info(conversations)")}
        assert "colour" in columns
    finally:
        s.close()
    Store(path).close()  # nothing left to run: opening again is a no-op


def test_a_database_from_a_newer_version_is_refused(tmp_path):
    path = tmp_path / "chats.sqlite3"
    Store(path).close()
    with sqlite3.connect(path) as con:
        con.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 5,))
    with pytest.raises(StoreError, match="newer version"):
        Store(path)


def test_search_finds_titles_and_message_text_and_escapes_wildcards(db):
    a = db.create_conversation("Prime numbers")
    b = db.create_conversation("Cooking")
    db.add_message(b.id, "user", "How long do I boil an egg? 100% sure_please")
    assert {c.id for c in db.conversations()} == {a.id, b.id}
    assert [c.id for c in db.conversations("prime")] == [a.id]
    assert [c.id for c in db.conversations("EGG")] == [b.id]
    assert [c.id for c in db.conversations("100%")] == [b.id]
    assert db.conversations("0%s") == []  # % is literal, not a wildcard
    assert [c.id for c in db.conversations("sure_please")] == [b.id]


def test_delete_can_be_undone_until_the_next_open(tmp_path):
    path = tmp_path / "chats.sqlite3"
    s = Store(path)
    conv = s.create_conversation("Doomed")
    s.add_message(conv.id, "user", "hello")
    s.delete_conversation(conv.id)
    assert s.conversations() == []
    s.undo_delete(conv.id)
    assert [c.id for c in s.conversations()] == [conv.id]
    s.delete_conversation(conv.id)
    s.close()
    s = Store(path)
    assert s.conversations() == []
    assert s.db.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 0  # cascaded
    s.close()


def test_streamed_tokens_are_committed_as_they_arrive_and_the_message_stays_incomplete(tmp_path):
    path = tmp_path / "chats.sqlite3"
    s = Store(path)
    conv = s.create_conversation("t")
    m = s.add_message(conv.id, "assistant", complete=False)
    s.append_tokens(m.id, 0, [Token("Hel", "target", 0), Token("lo", "draft", 1)], "Hello")
    # Another connection (as after a crash) sees the committed part.
    other = Store(path)
    seen = other.message(m.id)
    assert seen.content == "Hello" and not seen.complete
    assert [(t.text, t.source, t.round) for t in seen.tokens] == [("Hel", "target", 0), ("lo", "draft", 1)]
    stats = AnswerStats(n_tokens=3, n_drafted=2, n_accepted=1, rounds=[("draft", 2, 2, 1)], gen_s=1.0)
    s.append_tokens(m.id, 2, [Token("!", "lookup", 2)], "Hello!")
    s.finish_message(m.id, "Hello!", "stop", stats)
    seen = other.message(m.id)
    assert seen.complete and seen.finish_reason == "stop"
    assert seen.stats.rounds == [Round(DrafterKind.DRAFT_MODEL, 2, 2, 1)] and seen.stats.gen_tps == 3.0
    assert len(seen.tokens) == 3
    other.close()
    s.close()


def test_delete_messages_after_keeps_the_ones_before(db):
    conv = db.create_conversation("t")
    first = db.add_message(conv.id, "user", "one")
    answer = db.add_message(conv.id, "assistant", "two")
    db.add_message(conv.id, "user", "three")
    db.delete_messages_after(answer.id)
    assert [m.content for m in db.messages(conv.id)] == ["one", "two"]
    db.delete_messages_after(answer.id, inclusive=True)
    assert [m.id for m in db.messages(conv.id)] == [first.id]


def test_regenerated_answers_are_kept_as_alternates_and_one_is_shown(db):
    conv = db.create_conversation("t")
    question = db.add_message(conv.id, "user", "Name a colour.")
    first = db.add_message(conv.id, "assistant", "Teal")
    db.hide_message(first.id)
    second = db.add_message(conv.id, "assistant", "Crimson", variant_of=first.id)
    assert second.variants == [first.id, second.id]
    shown = db.messages(conv.id)
    assert [m.content for m in shown] == ["Name a colour.", "Crimson"] and shown[1].variants == [first.id, second.id]
    assert [c.id for c in db.conversations("teal")] == []  # an alternate not shown is not a search hit
    db.show_variant(first.id)
    assert [m.content for m in db.messages(conv.id)] == ["Name a colour.", "Teal"]
    assert db.message(second.id).content == "Crimson" and db.message(second.id).variants == [first.id, second.id]
    assert [c.id for c in db.conversations("teal")] == [conv.id]
    db.delete_messages_after(question.id)  # editing the question: every alternate goes
    assert db.message(first.id) is None and db.message(second.id) is None


def test_a_conversation_keeps_its_own_settings(db):
    conv = db.create_conversation("t", {"preset": "Concise", "system_prompt": "Be brief."})
    assert db.conversation(conv.id).settings == {"preset": "Concise", "system_prompt": "Be brief."}
    db.set_chat_settings(conv.id, {"sampling": {"temperature": 0.2}})
    assert db.conversations()[0].settings == {"sampling": {"temperature": 0.2}}
    with db._tx():  # a damaged value reads as no settings of its own
        db.db.execute("UPDATE conversations SET settings = 'not json' WHERE id = ?", (conv.id,))
    assert db.conversation(conv.id).settings == {}


def test_titles_and_history():
    assert title_from("  \n Why is the sky blue?\nmore") == "Why is the sky blue?"
    long = title_from("word " * 40)
    assert long.endswith("…") and len(long) <= 49
    assert title_from("") == "New chat"


def test_history_leaves_out_answers_that_are_only_an_error(db):
    conv = db.create_conversation("t")
    db.add_message(conv.id, "user", "q")
    db.add_message(conv.id, "assistant", "")
    assert [m.role for m in history(db.messages(conv.id))] == ["user"]


def test_recorder_builds_live_stats_writes_in_batches_and_finishes_with_the_engines_stats(db):
    conv = db.create_conversation("t")
    message = db.add_message(conv.id, "assistant", complete=False)
    rec = AnswerRecorder(db, message, request_id=7, target_step_s=0.01)
    rec.add_round(RoundEvent(Round(DrafterKind.DRAFT_MODEL, 4, 4, 3), 0.01, 0.02, 0.001, 0.12, n_tokens=4, gen_s=0.04))
    for text, source in [("a", "draft"), ("b", "draft"), ("c", "draft"), ("d", "target")]:
        rec.add_token(text, source, 0)
    live = rec.live_stats()
    assert live.n_tokens == 4 and live.n_accepted == 3 and live.tokens_by_source == {"draft": 3, "target": 1}
    assert live.ttft_s > 0 and live.plain_s == 0.12 and live.gen_s == 0.04 and live.estimated_speedup == 3.0
    rec.flush()
    rec.flush()  # nothing new: no second write
    assert db.message(message.id).content == "abcd"
    final = AnswerStats(n_tokens=4, rounds=[("draft", 4, 4, 3)], gen_s=0.5)
    rec.finish(DoneEvent(FinishReason.STOP, final, "abcd"))
    stored = db.message(message.id)
    assert stored.complete and stored.stats.gen_s == 0.5 and len(stored.tokens) == 4


def test_recorder_keeps_what_was_shown_when_the_worker_fails(db):
    conv = db.create_conversation("t")
    message = db.add_message(conv.id, "assistant", complete=False)
    rec = AnswerRecorder(db, message, 1)
    rec.add_token("par", "target", 0)
    rec.fail("Unexpected error: boom")
    stored = db.message(message.id)
    assert stored.complete and stored.finish_reason == "error" and stored.content == "par"
    assert "boom" in stored.error


def test_answer_params_round_trip_the_sampling_settings():
    sampling = SamplingParams(temperature=0.3, seed=42, stop=("###",))
    params = answer_params(sampling, SpecParams(mode=DrafterMode.LOOKUP, draft_length=3), "be brief", "T", None)
    json.dumps(params)  # stored as JSON
    assert sampling_from_params(json.loads(json.dumps(params))) == sampling
    assert params["spec"] == {"mode": "lookup", "draft_length": 3}


def test_settings_round_trip_and_forgive_bad_files(tmp_path):
    path = tmp_path / "settings.json"
    s = Settings(target=ModelSettings("/m/t.gguf", gpu_layers=-1, threads=4), temperature=0.2, seed=7)
    s.save(path)
    assert Settings.load(path) == s
    data = json.loads(path.read_text())
    data.update(temperature="hot", top_k=True, unknown=1, draft={"path": 3})
    path.write_text(json.dumps(data))
    loaded = Settings.load(path)
    assert loaded.temperature == Settings().temperature and loaded.top_k == Settings().top_k
    assert loaded.seed == 7 and loaded.target.gpu_layers == -1 and loaded.draft.path == ""
    path.write_text("{not json")
    assert Settings.load(path) == Settings()
    assert [p.read_text() for p in tmp_path.glob("settings.json.damaged-*")] == ["{not json"]


def test_settings_map_to_the_engines_records():
    s = Settings(
        target=ModelSettings("t.gguf", threads=0), draft=ModelSettings(""), draft_length=0, drafter_mode="both"
    )
    assert s.target_spec().n_threads is None and s.draft_spec() is None
    assert s.spec() == SpecParams(mode=DrafterMode.BOTH, draft_length=None)
    assert s.sampling(5).seed == 5


def test_export_markdown_and_json(db):
    conv = db.create_conversation("Primes")
    db.add_message(conv.id, "user", "List primes")
    m = db.add_message(conv.id, "assistant", complete=False, params={"target": "Qwen", "draft": "Qwen small"})
    stats = AnswerStats(
        n_tokens=4, n_drafted=4, n_accepted=3, rounds=[("draft", 4, 4, 3)], gen_s=0.5, ttft_s=0.1, target_step_s=0.2
    )
    db.append_tokens(m.id, 0, [Token("2, 3", "draft", 0), Token(", 5", "target", 0)], "2, 3, 5")
    db.finish_message(m.id, "2, 3, 5", "stop", stats)
    db.set_comparison(m.id, {"measured_speedup": 1.5, "spec_tps": 30, "plain_tps": 20, "identical": True})
    messages = db.messages(conv.id)
    md = to_markdown(conv, messages)
    assert "# Primes" in md and "## You" in md and "## Qwen (draft: Qwen small)" in md
    assert "75% of drafts accepted" in md and "≈1.60× vs plain (estimate)" in md and "1.50×" in md
    data = json.loads(to_json(conv, messages))
    assert data["title"] == "Primes" and data["messages"][1]["tokens"] == [["2, 3", "draft", 0], [", 5", "target", 0]]
    assert data["messages"][1]["stats"]["n_accepted"] == 3
