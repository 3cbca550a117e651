"""`python -m engine docs`: the document library in the terminal (list, add, index, search, remove)."""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

from engine.documents import grounding, indexer, retrieval
from engine.documents.library import Library, LibraryError


def add_parser(sub) -> None:
    docs = sub.add_parser("docs", help="your document collections: add folders, index them, search them")
    docs.add_argument("--dir", help="the library's folder (default: documents/ in the data folder)")
    verbs = docs.add_subparsers(dest="verb", required=True)
    verbs.add_parser("list", help="the collections, their sources and what is indexed")
    add = verbs.add_parser("add", help="add folders or files to a collection (created if new)")
    add.add_argument("name")
    add.add_argument("paths", nargs="+")
    index = verbs.add_parser("index", help="read what is new or changed, drop what is gone")
    index.add_argument("name")
    search = verbs.add_parser("search", help="the passages that best answer a question")
    search.add_argument("name", help="collection (comma-separated for several)")
    search.add_argument("question")
    search.add_argument("-n", "--limit", type=int, default=5)
    remove = verbs.add_parser("remove", help="remove a collection, or one of its sources (your files stay)")
    remove.add_argument("name")
    remove.add_argument("path", nargs="?")


def run(args: argparse.Namespace) -> int:
    from engine import paths

    library = Library(Path(args.dir) if args.dir else paths.documents_dir())
    try:
        if library.rebuilt:
            print(library.rebuilt, file=sys.stderr)
        return {"list": _list, "add": _add, "index": _index, "search": _search, "remove": _remove}[args.verb](
            library, args
        )
    except LibraryError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        library.close()


def _list(library: Library, args) -> int:
    collections = library.collections()
    if not collections:
        print("No collections yet: python -m engine docs add NAME FOLDER")
    for c in collections:
        files, passages, errors = library.counts(c.name)
        print(f"{c.name}: {files} files, {passages} passages" + (f", {errors} unreadable" if errors else ""))
        for source in c.sources:
            print(f"  {source}")
        for path, why in library.errors(c.name):
            print(f"  ! {why}" if path in why else f"  ! {path}: {why}")
    return 0


def _add(library: Library, args) -> int:
    if args.name not in {c.name for c in library.collections()}:
        library.add_collection(args.name)
    collection = library.add_sources(args.name, args.paths)
    print(
        f"{collection.name}: {len(collection.sources)} sources; index it with: python -m engine docs index {args.name}"
    )
    return 0


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
    return 0


def _search(library: Library, args) -> int:
    names = [n.strip() for n in args.name.split(",") if n.strip()]
    for name in names:
        library.collection(name)  # an unknown name says so
    hits = retrieval.search(library, names, args.question, args.limit)
    if not hits:
        print("nothing found")
    for i, hit in enumerate(hits, 1):
        heading = f" · {hit.heading}" if hit.heading else ""
        print(f"[{i}] {hit.where()}{heading}  (score {hit.score:.2f})")
        print(textwrap.indent(textwrap.shorten(hit.text, 400), "    "))
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


def ask(library: Library, names: list[str], question: str, fits) -> grounding.Grounded:
    """The question grounded in the best passages of these collections that fit."""
    return grounding.find_and_ground(library, names, question, fits)


def source_lines(grounded: grounding.Grounded, answer: str) -> list[str]:
    """ "Sources:" and a line per passage given, the cited ones marked."""
    if not grounded.sources:
        return []
    cited = set(grounding.cited(answer, len(grounded.sources)))
    return ["Sources (* cited):"] + [
        f"{'*' if n in cited else ' '} [{n}] {hit.path}: {grounding.label(hit).split(' · ', 1)[0].split(', ', 1)[-1]}"
        + (f" · {hit.heading}" if hit.heading else "")
        for n, hit in enumerate(grounded.sources, 1)
    ]
