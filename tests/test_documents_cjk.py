"""Chinese documents searched by their characters (engine/documents/cjk.py): the word index takes a
run of Chinese for one word, so a question finds nothing by words; its three-character pieces find
the passages that answer it. On the three Chinese articles about speculative decoding in
../shared/seeds (real documents nobody in this project wrote), and on Debian's licence texts for a
library without such text. An index from before this table gains it when opened."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from engine.documents import indexer, retrieval
from engine.documents.library import Library

SEEDS = Path(__file__).resolve().parents[2] / "shared" / "seeds"
QUESTION = "草稿模型的接受率怎么计算？"  # "how is the draft model's acceptance rate computed?"

pytestmark = pytest.mark.skipif(not SEEDS.is_dir(), reason="../shared/seeds (Chinese articles) is not beside the repo")


@pytest.fixture
def chinese(tmp_path) -> Path:
    folder = tmp_path / "articles"
    folder.mkdir()
    for article in sorted(SEEDS.glob("*.txt")):
        shutil.copy(article, folder / article.name)
    return folder


def indexed(root: Path, folder: Path) -> Library:
    library = Library(root)
    library.add_collection("articles")
    library.add_sources("articles", [folder])
    assert indexer.update(library, "articles").read == len(list(folder.iterdir()))
    return library


def test_a_chinese_question_finds_the_passages_that_share_its_characters(tmp_path, chinese):
    library = indexed(tmp_path / "lib", chinese)
    by_words = retrieval._ranked(library, "passages_fts", retrieval.fts_query(QUESTION), ["articles"], 5)
    assert by_words == []  # the whole question is one "word" to unicode61: nothing matches it
    hits = retrieval.search(library, ["articles"], QUESTION, 3)
    assert hits and all("接受" in h.text or "草稿" in h.text for h in hits)
    assert "接受率" in hits[0].text or "接受" in hits[0].text and "草稿" in hits[0].text
    mixed = retrieval.search(library, ["articles"], "什么是 KV Cache？", 3)  # words and characters, fused
    assert any("KV Cache" in h.text for h in mixed)

    (first,) = [p for p in chinese.iterdir() if p.name.startswith("000_")]
    first.unlink()  # a deleted file takes its pieces with it
    indexer.update(library, "articles")
    assert all(not h.path.endswith(first.name) for h in retrieval.search(library, ["articles"], QUESTION, 10))
    assert library.db.execute("SELECT COUNT(*) FROM passages_grams").fetchone()[0] == library.counts("articles")[1]
    library.close()


def test_an_index_from_before_the_pieces_gains_them_when_opened(tmp_path, chinese):
    library = indexed(tmp_path / "lib", chinese)
    n = library.counts("articles")[1]
    library.db.executescript(  # as version 1 left it: no table of pieces
        "DROP TRIGGER passages_added_grams; DROP TRIGGER passages_removed_grams; DROP TABLE passages_grams;"
        " PRAGMA user_version = 1;"
    )
    library.close()
    reopened = Library(tmp_path / "lib")
    assert not reopened.rebuilt  # kept, not set aside
    assert reopened.db.execute("PRAGMA user_version").fetchone()[0] == 2
    assert reopened.db.execute("SELECT COUNT(*) FROM passages_grams").fetchone()[0] == n
    assert retrieval.search(reopened, ["articles"], QUESTION, 3)
    reopened.close()


def test_a_library_without_such_text_indexes_no_pieces(tmp_path):
    folder = tmp_path / "licences"
    folder.mkdir()
    shutil.copy("/usr/share/common-licenses/Apache-2.0", folder / "Apache-2.0")
    library = indexed(tmp_path / "lib", folder)
    assert library.db.execute("SELECT COUNT(*) FROM passages_grams").fetchone()[0] == 0
    assert retrieval.search(library, ["articles"], "patent litigation", 3)
    library.close()
