"""`python -m engine docs`: the document library in the terminal (list, add, index, search, remove, embedder,
reranker)."""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

from engine.documents import chosen, grounding, indexer, readers, retrieval, vectors
from engine.documents.library import MAX_PASSAGES, Library, LibraryError
from engine.errors import EngineError


def add_parser(sub) -> None:
    docs = sub.add_parser("docs", help="your document collections: add folders, index them, search them")
    docs.add_argument("--dir", help="the library's folder (default: documents/ in the data folder)")
    verbs = docs.add_subparsers(dest="verb", required=True)
    verbs.add_parser("list", help="the collections, their sources and what is indexed")
    add = verbs.add_parser("add", help="add folders or files to a collection (created if new)")
    add.add_argument("name")
    add.add_argument("paths", nargs="+")
    index = verbs.add_parser(
        "index", help="read what is new or changed, drop what is gone; then vectors, with an embedding model"
    )
    index.add_argument("name")
    search = verbs.add_parser("search", help="the passages that best answer a question")
    search.add_argument("name", help="collection (comma-separated for several)")
    search.add_argument("question")
    search.add_argument("-n", "--limit", type=int, default=5)
    remove = verbs.add_parser("remove", help="remove a collection, or one of its sources (your files stay)")
    remove.add_argument("name")
    remove.add_argument("path", nargs="?")
    embedder = verbs.add_parser(
        "embedder", help="the embedding model for hybrid search (a GGUF such as nomic-embed-text-v1.5), or --none"
    )
    embedder.add_argument("path", nargs="?", help="the model file; without it: the model in use")
    embedder.add_argument("--none", action="store_true", help="keyword search only (stored vectors are kept)")
    reranker = verbs.add_parser(
        "reranker",
        help="a small text-generation model (e.g. the draft model) that reorders what a search found, or --none",
    )
    reranker.add_argument("path", nargs="?", help="the model file; without it: the model in use")
    reranker.add_argument("--none", action="store_true", help="keep the search's own order")
    passages = verbs.add_parser("passages", help="how many passages go before a question, at most (the app's too)")
    passages.add_argument("n", nargs="?", type=int, help=f"1 to {MAX_PASSAGES}; without it: the number in use")


def run(args: argparse.Namespace) -> int:
    from engine import paths

    library = Library(Path(args.dir) if args.dir else paths.documents_dir())
    try:
        if library.rebuilt:
            print(library.rebuilt, file=sys.stderr)
        verbs = {
            "list": _list,
            "add": _add,
            "index": _index,
            "search": _search,
            "remove": _remove,
            "embedder": _embedder,
            "reranker": _reranker,
            "passages": _passages,
        }
        return verbs[args.verb](library, args)
    except LibraryError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except EngineError as e:  # the embedding model: not one, or llama.cpp could not load or run it
        print(f"error: {e.user_message()}", file=sys.stderr)
        return 2
    finally:
        library.close()


def _list(library: Library, args) -> int:
    collections = library.collections()
    if not collections:
        print("No collections yet: python -m engine docs add NAME FOLDER")
    model = _model_key(library)
    for c in collections:
        files, passages, errors = library.counts(c.name)
        with_vectors = f", {vectors.counts(library, c.name, model)} with vectors" if model else ""
        print(
            f"{c.name}: {_many(files, 'file')}, {_many(passages, 'passage')}{with_vectors}"
            + (f", {errors} unreadable" if errors else "")
        )
        for source in c.sources:
            print(f"  {source}")
        for path, why in library.errors(c.name):
            name = Path(path).name  # a reason begins with the file's name: "a.pdf: encrypted; …"
            print(f"  ! {path}{why[len(name) :]}" if why.startswith(f"{name}: ") else f"  ! {path}: {why}")
    return 0


def _add(library: Library, args) -> int:
    if args.name not in {c.name for c in library.collections()}:
        library.add_collection(args.name)
    collection = library.add_sources(args.name, args.paths)
    print(
        f"{collection.name}: {_many(len(collection.sources), 'folder or file', 'folders and files')}; "
        f"index it with: python -m engine docs index {args.name}"
    )
    return 0


def _many(n: int, one: str, many: str = "") -> str:
    return f"{n:,} {one}" if n == 1 else f"{n:,} {many or one + 's'}"


def _index(library: Library, args) -> int:
    def show(p: indexer.Progress) -> None:
        left = f", {p.seconds_left:.0f} s left" if p.seconds_left is not None else ""
        print(
            f"\r{p.files_done}/{p.files_total} files, {p.passages} passages, {p.mb_per_minute:.1f} MB/min{left}   ",
            end="",
            file=sys.stderr,
            flush=True,
        )

    controls = indexer.Controls()
    try:
        report = indexer.update(library, args.name, show, controls)
    except KeyboardInterrupt:
        print("\nstopped: what was indexed is kept; run it again to go on", file=sys.stderr)
        return 130
    print(file=sys.stderr)
    print(
        f"read {report.read}, unchanged {report.unchanged}, dropped {report.dropped}, unreadable {len(report.errors)}"
    )
    for _, why in report.errors:
        print(f"  ! {why}")
    if report.cancelled or library.embedding_model() is None:
        return 0
    return _index_vectors(library, args.name, controls)


def _index_vectors(library: Library, name: str, controls: indexer.Controls) -> int:
    """The vector pass, after the keyword index (which search uses meanwhile)."""
    from engine.documents.embeddings import Embedder

    def show(p: vectors.VectorProgress) -> None:
        left = f", {p.seconds_left:.0f} s left" if p.seconds_left is not None else ""
        print(
            f"\rvectors: {p.done}/{p.total} passages, {p.per_second:.1f}/s{left}   ",
            end="",
            file=sys.stderr,
            flush=True,
        )

    path = library.embedding_model()
    try:
        embedder = Embedder(path)
    except EngineError as e:
        print(f"error: vectors not computed ({e}); keyword search works as before.", file=sys.stderr)
        return 2
    try:
        report = vectors.update(library, name, embedder, show, controls)
    except KeyboardInterrupt:
        print("\nstopped: the vectors stored are kept; run it again to go on", file=sys.stderr)
        return 130
    finally:
        embedder.close()
    print(file=sys.stderr)
    print(
        f"vectors ({embedder.name}): {report.embedded} stored, {vectors.missing(library, name, embedder.key)} missing"
    )
    return 0


def _search(library: Library, args) -> int:
    names = [n.strip() for n in args.name.split(",") if n.strip()]
    for name in names:
        library.collection(name)  # an unknown name says so
    embedder, reranker = search_embedder(library), search_reranker(library)
    try:
        hits = retrieval.search(library, names, args.question, args.limit, embedder, reranker)
        _say_if_reranking_failed(reranker)
    finally:
        for model in (embedder, reranker):
            if model is not None:
                model.close()
    if not hits:
        print("nothing found")
    for i, hit in enumerate(hits, 1):
        heading = f" · {hit.heading}" if hit.heading else ""
        print(f"[{i}] {hit.where()}{heading}  (score {hit.score:.4g})")
        print(textwrap.indent(textwrap.shorten(hit.text, 400), "    "))
    return 0


def _model_key(library: Library) -> str | None:
    path = library.embedding_model()
    if path is None:
        return None
    from engine.documents.embeddings import model_key

    try:
        return model_key(path)
    except OSError:
        return None


def _embedder(library: Library, args) -> int:
    from engine.documents.embeddings import check

    if args.none:
        library.set_embedding_model(None)
        print("No embedding model: keyword search only (vectors already stored are kept for the model).")
        return 0
    if args.path is None:
        path = library.embedding_model()
        if path is None:
            print("No embedding model: keyword search only. Choose one: python -m engine docs embedder FILE.gguf")
        else:
            print(f"{path}" + ("" if Path(path).is_file() else " (missing: keyword search only)"))
        return 0
    info = check(args.path)  # not an embedding model: says what it is
    library.set_embedding_model(args.path)
    arch = info.architecture
    print(
        f"Embedding model: {info.name} ({arch}, {info.get(f'{arch}.embedding_length')} dimensions). "
        "python -m engine docs index NAME computes the vectors of a collection."
    )
    return 0


def _passages(library: Library, args) -> int:
    if args.n is not None:
        if not 1 <= args.n <= MAX_PASSAGES:
            print(f"error: passages before a question: 1 to {MAX_PASSAGES}, not {args.n}", file=sys.stderr)
            return 2
        library.set_passages_per_question(args.n)
    print(f"Up to {library.passages_per_question()} passages before each question, as many as fit the context.")
    return 0


def _reranker(library: Library, args) -> int:
    if args.none:
        library.set_reranking_model(None)
        print("No reranking model: passages in the search's own order.")
        return 0
    if args.path is None:
        path = library.reranking_model()
        if path is None:
            print("No reranking model. Choose one (a small chat model): python -m engine docs reranker FILE.gguf")
        else:
            print(f"{path}" + ("" if Path(path).is_file() else " (missing: the search's own order)"))
        return 0
    from engine.documents.rerank import Reranker

    with Reranker(args.path) as reranker:  # refuses an embedding model, or a file llama.cpp cannot load
        name = reranker.name
    library.set_reranking_model(args.path)
    print(
        f"Reranking model: {name}. Each search scores its best passages with it: about a second a passage "
        "on a CPU, a fraction on a GPU."
    )
    return 0


def _remove(library: Library, args) -> int:
    library.collection(args.name)
    if args.path:
        library.remove_source(args.name, str(Path(args.path).expanduser().resolve()))
    else:
        library.remove_collection(args.name)
    return 0


def open_collections(names: list[str]) -> Library:
    """The library, with each named collection checked to exist (LibraryError says which does not)."""
    from engine import paths

    library = Library(paths.documents_dir())
    try:
        for name in names:
            library.collection(name)
    except LibraryError:
        library.close()
        raise
    return library


def ask(library: Library, names: list[str], question: str, fits, embedder=None, reranker=None) -> grounding.Grounded:
    """The question grounded in the best passages of these collections that fit (embedder: hybrid
    search; reranker: the best reordered)."""
    grounded = grounding.find_and_ground(library, names, question, fits, embedder, reranker)
    _say_if_reranking_failed(reranker)
    return grounded


def _say_if_reranking_failed(reranker) -> None:
    if reranker is not None and reranker.failure is not None:
        print(f"passages in the search's order: reranking failed: {reranker.failure}", file=sys.stderr)


def search_embedder(library: Library):
    """The library's embedding model, loaded, for hybrid search; None (keyword search) when none is
    chosen or it cannot be loaded (said on stderr)."""
    return _loaded(chosen.embedding_model(), library, "keyword search only")


def search_reranker(library: Library):
    """The library's reranking model, loaded; None (the search's order) when none is chosen or it
    cannot be loaded (said on stderr)."""
    return _loaded(chosen.reranking_model(), library, "passages in the search's own order")


def _loaded(choice: chosen.ChosenModel, library: Library, instead: str):
    return choice.get(library, lambda e: print(f"{instead}: {e}", file=sys.stderr))


def source_lines(grounded: grounding.Grounded, answer: str) -> list[str]:
    """ "Sources:" and a line per passage given, the cited ones marked."""
    if not grounded.sources:
        return []
    cited = set(grounding.cited(answer, len(grounded.sources)))
    lines = ["Sources (* cited):"]
    for n, hit in enumerate(grounded.sources, 1):
        where = readers.location(hit.path, hit.page, hit.line_start, hit.line_end)
        lines.append(
            f"{'*' if n in cited else ' '} [{n}] {hit.path}"
            + (f": {where}" if where else "")
            + (f" · {hit.heading}" if hit.heading else "")
        )
    return lines
