"""The local model library: every GGUF file Specula can find, described from its header alone.

Sources: the app's models folder, files the user added from anywhere, and GGUF files already on
disk in the Hugging Face cache and LM Studio's model folders. Headers are read without loading
a model and remembered by (path, size, mtime), in memory and in a small JSON cache next to the
library's state, so a rescan costs a few stat calls. Nothing here touches the network.
"""

from __future__ import annotations

import json
import logging
import math
import platform
import re
import subprocess
import threading
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from pathlib import Path

from engine.chat import formats as chat_formats
from engine.errors import EngineError, ModelFileError
from engine.gguf.header import read_header
from engine.gguf.names import display_name
from engine.gguf.pairing import MAX_VOCAB_SIZE_DIFFERENCE, VocabInfo, incompatibility
from engine.json_file import write_json
from engine.paths import data_dir
from engine.paths import models_dir as default_models_dir

log = logging.getLogger(__name__)

# A good draft has 1/5 to 1/30 of the target's parameters; 1/12 is the geometric middle.
DRAFT_RATIO_RANGE = (1 / 30, 1 / 5)
_IDEAL_DRAFT_RATIO = math.sqrt(DRAFT_RATIO_RANGE[0] * DRAFT_RATIO_RANGE[1])

# engine/models/download.py writes this record beside a model while it downloads (split parts land one by one).
PENDING_SUFFIX = ".download.json"

_SPLIT = re.compile(r"^(?P<stem>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)
# 2: headers checked against llama.cpp's limits (files once accepted may be damaged); 3: chat formats;
# 4: clean display names
_CACHE_VERSION = 5  # 5: a summary's kind (chat, embedding, reranker)


class LibraryError(EngineError):
    """The library cannot do what was asked with this file."""


@dataclass(frozen=True)
class ModelEntry:
    path: Path  # for a split model: its first part
    name: str
    architecture: str
    n_params: int
    quantization: str
    file_size: int  # all parts together for a split model
    context_length: int | None
    vocab_fingerprint: str
    source: str  # "app", "added", "hf-cache", "lmstudio"
    removable: bool  # True only for files in the app's models folder
    family: str = ""  # general.basename, lower case (e.g. "qwen2.5-coder"): drafts rank by it
    n_vocab: int = 0
    # "" when the file has its own chat template; otherwise llama.cpp's format for its family
    # ("gemma"), or "none": a base model with no chat format at all.
    chat_format: str = ""
    # For people: the user's rename, else the header's name without packaging words (engine/gguf/names.py)
    display_name: str = ""

    @property
    def title(self) -> str:
        return self.display_name or self.name

    @property
    def is_base_model(self) -> bool:
        return bool(self.chat_format)

    @property
    def chat_format_label(self) -> str:
        """What the library says about a file without a chat template ("" for one with its own)."""
        if not self.chat_format:
            return ""
        if self.chat_format == "none":
            return "base model — no chat format"
        return f"base model — {chat_formats.label(self.chat_format)} format"

    @property
    def size_label(self) -> str:
        """Parameter count the way model names say it: 135M, 1.5B."""
        return params_label(self.n_params)


def params_label(n_params: int) -> str:
    if n_params >= 1e9:
        return f"{n_params / 1e9:.1f}B".replace(".0B", "B")
    return f"{round(n_params / 1e6)}M"


def split_part(filename: str) -> tuple[str, int, int] | None:
    """(stem, index, count) for a split GGUF part such as 'x-00001-of-00003.gguf', else None."""
    m = _SPLIT.match(filename)
    return (m["stem"], int(m["index"]), int(m["count"])) if m else None


def split_part_names(first: Path) -> list[Path]:
    """All the parts' paths of a split model given its first part (just [first] if not split)."""
    parsed = split_part(first.name)
    if not parsed:
        return [first]
    stem, _, count = parsed
    return [first.with_name(f"{stem}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]


@dataclass(frozen=True)
class DraftChoices:
    """Every other model judged as a draft for one target."""

    offered: list[ModelEntry]  # compatible, best first
    hidden: list[tuple[ModelEntry, str]]  # the rest, each with the reason in a few words


@dataclass(frozen=True)
class _Summary:
    """What the library keeps of one file's header (the token list itself is not kept)."""

    name: str
    architecture: str
    n_params: int
    quantization: str
    context_length: int | None
    vocab_fingerprint: str
    family: str
    n_vocab: int
    chat_format: str = ""
    display_name: str = ""
    kind: str = "chat"  # "embedding" or "reranker": models for document search, not for chatting


def _summarize(path: Path) -> _Summary:
    info = read_header(path)
    return _Summary(
        name=info.name,
        architecture=info.architecture,
        n_params=info.n_params,
        quantization=info.quantization,
        context_length=info.context_length,
        vocab_fingerprint=info.vocab_fingerprint if info.tokens else "",
        family=_family(info.get("general.basename"), info.name),
        n_vocab=len(info.tokens),
        chat_format="" if info.chat_template else (chat_formats.detect_family(info) or "none"),
        display_name=display_name(info, path),
        kind="embedding" if info.is_embedding_model else "reranker" if info.is_reranker else "chat",
    )


def _family(basename: str | None, name: str) -> str:
    if basename:
        return str(basename).lower()
    # No basename: drop size labels, quantization and fine-tune words from the name.
    words = re.split(r"[\s_\-]+", name.lower())
    noise = re.compile(r"^(\d+(\.\d+)?[bmk]|[if]?q\d.*|f16|bf16|f32|instruct|chat|gguf|it)$")
    return "-".join(w for w in words if w and not noise.match(w))


@lru_cache(maxsize=8)
def _vocab(path: str, size: int, mtime_ns: int) -> VocabInfo:
    """The full vocabulary, for the compatibility rules; a few files' worth kept in memory."""
    return VocabInfo.from_header(read_header(path))


def _stat_key(path: Path) -> tuple[str, int, int]:
    st = path.stat()
    return str(path.resolve()), st.st_size, st.st_mtime_ns


def _cache_key(key: tuple[str, int, int]) -> str:
    return "|".join(map(str, key))


def lmstudio_default_dirs() -> list[Path]:
    home = Path.home()
    return [home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models"]


def hf_cache_default_dir() -> Path:
    from huggingface_hub import constants  # respects HF_HOME / HF_HUB_CACHE; opens no connection

    return Path(constants.HF_HUB_CACHE)


class ModelLibrary:
    """All local models. Its methods take a lock, so a background thread may scan and judge drafts
    (reading headers, which takes a while) while the GUI thread uses the results."""

    def __init__(
        self,
        models_dir: Path | None = None,
        state_file: Path | None = None,
        scan_external: bool = True,
        *,
        hf_cache_dir: Path | None = None,
        lmstudio_dirs: Iterable[Path] | None = None,
    ):
        self.models_dir = Path(models_dir) if models_dir else default_models_dir()
        self.state_file = Path(state_file) if state_file else data_dir() / "library.json"
        self.cache_file = self.state_file.with_name("library-cache.json")
        self.scan_external = scan_external
        self.hf_cache_dir = Path(hf_cache_dir) if hf_cache_dir else None
        self.lmstudio_dirs = [Path(d) for d in lmstudio_dirs] if lmstudio_dirs is not None else None
        self._lock = threading.RLock()
        self.problems: list[tuple[Path, str]] = []
        self.entries: list[ModelEntry] = []
        self.embedding_models: list[Path] = []  # found by the last scan: for document search, not in entries
        self._added: list[Path] = self._load_added()
        self._names: dict[str, str] = self._load_names()  # path -> the user's name for it
        self._summaries: dict[str, dict] = {}  # cache key -> asdict(_Summary)
        self._verdicts: dict[str, str] = {}  # "target key||draft key" -> reason ("" = compatible)
        self._load_cache()

    # -- scanning ---------------------------------------------------------------------------

    def scan(self) -> list[ModelEntry]:
        """Find and describe every model; files that are not usable GGUF go to .problems."""
        with self._lock:
            return self._scan()

    def _scan(self) -> list[ModelEntry]:
        self.problems = []
        self.embedding_models = []
        entries: list[ModelEntry] = []
        seen: set[str] = set()
        for source, path in self._candidates():
            try:
                real = str(path.resolve())
                if real in seen:
                    continue
                seen.add(real)
                entry = self._entry(path, source)
            except ModelFileError as e:
                self.problems.append((path, str(e)))
                continue
            except OSError as e:
                self.problems.append((path, f"'{path.name}' cannot be read: {e.strerror or e}"))
                continue
            except Exception as e:  # noqa: BLE001 - one bad file must never hide the other models
                log.exception("reading %s failed", path)
                self.problems.append((path, f"'{path.name}' cannot be read: {type(e).__name__}: {e}"))
                continue
            if entry is not None:
                entries.append(entry)
        self._save_cache()
        self.entries = entries
        return entries

    def _candidates(self) -> Iterator[tuple[str, Path]]:
        """(source, path) for every GGUF file, in priority order: the first source to list a file wins."""
        yield from (("app", p) for p in _gguf_files(self.models_dir))
        for path in self._added:
            if path.is_file():
                yield "added", path
            else:
                self.problems.append((path, f"'{path.name}' was added to the library but is no longer at {path}."))
        if not self.scan_external:
            return
        hf = self.hf_cache_dir or hf_cache_default_dir()
        # Only snapshots/: blobs/ holds the same files under hash names, plus unfinished downloads.
        for snapshots in sorted(hf.glob("models--*/snapshots")):
            yield from (("hf-cache", p) for p in _gguf_files(snapshots))
        for folder in self.lmstudio_dirs if self.lmstudio_dirs is not None else lmstudio_default_dirs():
            yield from (("lmstudio", p) for p in _gguf_files(folder))

    def _entry(self, path: Path, source: str) -> ModelEntry | None:
        if not path.is_file():
            raise ModelFileError(f"Model file not found: {path}")
        parsed = split_part(path.name)
        parts = split_part_names(path)
        if parsed and parts[0].with_name(parts[0].name + PENDING_SUFFIX).exists():
            return None  # a split model still downloading: not a model yet, not a problem either
        if parsed and parsed[1] != 1:
            if not parts[0].is_file():
                raise ModelFileError(f"'{path.name}' is part of a split model whose first part is missing.")
            return None  # listed once, through its first part
        missing = [p.name for p in parts if not p.is_file()]
        if missing:
            raise ModelFileError(f"'{path.name}' is a split model, but its part '{missing[0]}' is missing.")
        summaries = [self._summary(part) for part in parts]
        head = summaries[0]
        if head.architecture == "clip":
            return None  # a vision projector (mmproj): GGUF, but not a model one can chat with
        if head.kind != "chat":  # an embedding model or reranker: for document search, not chat
            if head.kind == "embedding":
                self.embedding_models.append(path)
            return None
        return ModelEntry(
            path=path,
            name=head.name,
            architecture=head.architecture,
            n_params=sum(s.n_params for s in summaries),
            quantization=head.quantization,
            file_size=sum(p.stat().st_size for p in parts),
            context_length=head.context_length,
            vocab_fingerprint=head.vocab_fingerprint,
            source=source,
            removable=source == "app",
            family=head.family,
            n_vocab=head.n_vocab,
            chat_format=head.chat_format,
            display_name=self._names.get(str(path)) or head.display_name or head.name,
        )

    def _summary(self, path: Path) -> _Summary:
        """The header summary, read once per (path, size, mtime); bad files are remembered as bad."""
        key = _cache_key(_stat_key(path))
        cached = self._summaries.get(key)
        if cached is None:
            try:
                cached = asdict(_summarize(path))
            except ModelFileError as e:
                cached = {"problem": str(e)}
            self._summaries[key] = cached
        if "problem" in cached:
            raise ModelFileError(cached["problem"])
        return _Summary(**cached)

    # -- user actions -----------------------------------------------------------------------

    def add_file(self, path) -> ModelEntry:
        """Validate a GGUF file from anywhere and remember it; raises ModelFileError if unusable."""
        with self._lock:
            return self._add_file(path)

    def _add_file(self, path) -> ModelEntry:
        path = Path(path).expanduser().absolute()
        source = "app" if _is_inside(path, self.models_dir) else "added"
        entry = self._entry(path, source)
        kind = self._summary(path).kind if entry is None and path.is_file() else "chat"
        if kind != "chat":
            raise ModelFileError(
                f"'{path.name}' is {'an embedding model' if kind == 'embedding' else 'a reranker'}, not a chat model.",
                hint="An embedding model finds passages by meaning: choose it in File → Documents….",
            )
        if entry is None:
            raise ModelFileError(
                f"'{path.name}' is not a chat model (a split model's later part, or a vision projector).",
                hint="Add the file whose name ends in -00001-of-….gguf, or the model file itself.",
            )
        if source == "added" and path not in self._added:
            self._added.append(path)
            self._save_added()
        self._save_cache()
        return entry

    def describe(self, path) -> ModelEntry | None:
        """The entry for a GGUF file whether or not the library lists it (a model chosen by path in the
        settings), without remembering it; None for a file that is not a chat model."""
        path = Path(path).expanduser().absolute()
        with self._lock:
            listed = next((e for e in self.entries if e.path == path), None)
            return listed or self._entry(path, "app" if _is_inside(path, self.models_dir) else "added")

    def remove(self, entry: ModelEntry) -> None:
        """Delete a model from the app's folder, or forget an added file; other folders are left alone."""
        with self._lock:
            self._remove(entry)

    def _remove(self, entry: ModelEntry) -> None:
        if entry.source == "added":
            self._added = [p for p in self._added if p != entry.path]
            self._save_added()
        elif entry.source == "app" and _is_inside(entry.path, self.models_dir):
            for part in split_part_names(entry.path):
                part.unlink(missing_ok=True)
        else:
            owner = {"hf-cache": "the Hugging Face cache", "lmstudio": "LM Studio"}.get(entry.source, "another app")
            raise LibraryError(
                f"'{entry.path.name}' belongs to {owner}; Specula only deletes models in its own folder.",
                hint="Delete it with the tool that downloaded it.",
            )
        self.entries = [e for e in self.entries if e.path != entry.path]

    def compatible_drafts(self, target: ModelEntry) -> list[ModelEntry]:
        """Local models that can draft for target (llama.cpp's vocabulary rules), best first.

        Best: same family, then a size nearest 1/12 of the target's (the useful range is 1/5
        to 1/30). May read a few headers the first time (about 0.2 s each for 150k-token
        vocabularies); the verdicts are cached.
        """
        return self.draft_choices(target).offered

    def draft_choices(self, target: ModelEntry) -> DraftChoices:
        """compatible_drafts, plus every other model with the reason it is not offered.

        Vocabularies are read through the caches (each file's once; verdicts kept on disk), so
        the target's header is not read again per candidate.
        """
        with self._lock:
            entries = self.entries or self._scan()
            n_verdicts = len(self._verdicts)
            offered, hidden = [], []
            for entry in entries:
                if entry.path == target.path:
                    continue
                reason = self._draft_reason(target, entry)
                if reason:
                    hidden.append((entry, reason))
                else:
                    offered.append(entry)
            if len(self._verdicts) != n_verdicts:
                self._save_cache()
        return DraftChoices(sorted(offered, key=lambda d: _draft_rank(target, d)), hidden)

    def draft_problem(self, target_path, draft_path) -> str | None:
        """Why the file draft_path cannot draft for target_path, in draft_choices' words (size first,
        then llama.cpp's vocabulary rules), or None when it can; for files in the library or not.
        Through the same caches; raises ModelFileError or OSError for a file that is not a usable model."""
        draft_path = Path(draft_path).expanduser().absolute()
        if not draft_path.is_file():
            return "the file is missing"
        with self._lock:
            target, draft = (self._entry(Path(p).expanduser().absolute(), "added") for p in (target_path, draft_path))
            if target is None or draft is None:
                raise ModelFileError(
                    f"'{(draft_path if draft is None else Path(target_path)).name}' is not a chat model."
                )
            return self._draft_reason(target, draft) or None

    def _draft_reason(self, target: ModelEntry, draft: ModelEntry) -> str:
        """Why draft cannot draft for target, or "" when it can. Cheap rejections first."""
        if draft.n_params >= target.n_params:
            return "not smaller than the target"
        if abs(draft.n_vocab - target.n_vocab) > MAX_VOCAB_SIZE_DIFFERENCE:
            return f"a different vocabulary ({draft.n_vocab:,} tokens, the target has {target.n_vocab:,})"
        try:
            return self._verdict(target.path, draft.path)
        except (OSError, ModelFileError):
            return "cannot be read now"  # changed or gone since the scan; the next scan reports it

    def _verdict(self, target: Path, draft: Path) -> str:
        t_key, d_key = _stat_key(target), _stat_key(draft)
        verdict_key = f"{_cache_key(t_key)}||{_cache_key(d_key)}"
        if verdict_key not in self._verdicts:
            self._verdicts[verdict_key] = incompatibility(_vocab(*t_key), _vocab(*d_key)) or ""
        return self._verdicts[verdict_key]

    def reveal_in_file_manager(self, entry: ModelEntry) -> None:
        try:
            subprocess.Popen(reveal_command(entry.path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except OSError as e:
            raise LibraryError(
                f"Could not open a file manager at {entry.path.parent}: {e.strerror or e}",
                hint="Open the folder yourself; the path is shown in the library.",
            ) from e

    def rename(self, path, name: str) -> None:
        """Call the model at path `name` from now on ("" = its name from the header again); the file
        is not touched, the name is kept in the library's state file."""
        key, name = str(Path(path)), " ".join(name.split())
        with self._lock:
            if name:
                self._names[key] = name
            else:
                self._names.pop(key, None)
            self._save_added()
            self.entries = [
                replace(e, display_name=self._names.get(key) or self._header_title(e)) if str(e.path) == key else e
                for e in self.entries
            ]

    def _header_title(self, entry: ModelEntry) -> str:
        try:
            return self._summary(entry.path).display_name or entry.name
        except (OSError, ModelFileError):
            return entry.name

    def user_name(self, path) -> str:
        """The user's name for the model at path, or "" (cheap: no header is read)."""
        with self._lock:
            return self._names.get(str(Path(path)), "")

    # -- persistence ------------------------------------------------------------------------

    def _load_added(self) -> list[Path]:
        data = _read_json(self.state_file)
        return [Path(p) for p in data.get("added", []) if isinstance(p, str)]

    def _load_names(self) -> dict[str, str]:
        names = _read_json(self.state_file).get("names", {})
        return (
            {k: v for k, v in names.items() if isinstance(k, str) and isinstance(v, str)}
            if isinstance(names, dict)
            else {}
        )

    def _save_added(self) -> None:
        write_json(self.state_file, {"added": [str(p) for p in self._added], "names": self._names})

    def _load_cache(self) -> None:
        data = _read_json(self.cache_file)
        # A cache from another version of this code is simply rebuilt.
        if data.get("version") == _CACHE_VERSION:
            self._summaries = data.get("summaries", {})
            self._verdicts = data.get("verdicts", {})

    def _save_cache(self) -> None:
        # Forget files that changed or vanished, so the cache does not grow forever.
        live = {_cache_key(_stat_key(p)) for p in self._live_files()}
        self._summaries = {k: v for k, v in self._summaries.items() if k in live}
        self._verdicts = {k: v for k, v in self._verdicts.items() if all(part in live for part in k.split("||"))}
        payload = {"version": _CACHE_VERSION, "summaries": self._summaries, "verdicts": self._verdicts}
        write_json(self.cache_file, payload)

    def _live_files(self) -> Iterator[Path]:
        for key in self._summaries:
            path = Path(key.split("|")[0])
            if path.is_file():
                yield path


def _gguf_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.rglob("*") if p.suffix.lower() == ".gguf" and p.is_file())


def _is_inside(path: Path, folder: Path) -> bool:
    try:
        path.absolute().relative_to(folder.absolute())
    except ValueError:
        return False
    return True


def draft_size_distance(target_params: int, draft_params: int) -> float:
    """How far a draft's size is from the ideal share of the target's (0 is ideal), in log space."""
    ratio = max(draft_params, 1) / max(target_params, 1)
    return abs(math.log(ratio / _IDEAL_DRAFT_RATIO))


def _draft_rank(target: ModelEntry, draft: ModelEntry) -> tuple:
    same_family = draft.family == target.family
    return (not same_family, draft_size_distance(target.n_params, draft.n_params), draft.file_size)


def reveal_command(path: Path, system: str | None = None) -> list[str]:
    """The command that shows a file in the platform's file manager."""
    system = system or platform.system()
    if system == "Darwin":
        return ["open", "-R", str(path)]
    if system == "Windows":
        return ["explorer", f"/select,{path}"]
    return ["xdg-open", str(path.parent)]  # freedesktop has no portable "select this file"


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
