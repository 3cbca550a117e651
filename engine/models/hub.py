"""The Hugging Face hub: search GGUF repositories, list their files, read a header remotely.

With engine/models/download.py this is the only code in Specula that opens network connections, and
only when the user asks (the downloader dialog). Everything goes through huggingface_hub: its
HfApi for the API calls, and its URL builder and shared HTTP session for file bytes, so proxy
settings, HF_ENDPOINT, HF_TOKEN and HF_HUB_OFFLINE apply as they do for every hub tool.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from pathlib import PurePosixPath, PureWindowsPath

import httpx2
from huggingface_hub import HfApi, constants, hf_hub_url
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

from engine.errors import EngineError, ModelFileError
from engine.gguf.header import GGUFInfo, HeaderIncomplete, parse_header
from engine.gguf.pairing import VocabInfo, incompatibility
from engine.models.library import ModelEntry, draft_size_distance, split_part

SORTS = {"downloads": "downloads", "likes": "likes", "recent": "last_modified"}

HEADER_FIRST_FETCH = 2 << 20  # most headers fit; Qwen's 152k-token vocabulary needs ~6 MB
HEADER_MAX_BYTES = 64 << 20
TIMEOUT = httpx2.Timeout(30.0, connect=10.0)

_QUANT = re.compile(r"(?<![A-Za-z0-9])(I?Q\d(?:_[A-Z0-9]+)*|[BM]?F(?:16|32)|BF16|MXFP4(?:_MOE)?)(?![A-Za-z0-9])", re.I)
_SIZE_IN_NAME = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)\s*([BM])(?![a-z])", re.I)


class HubError(EngineError):
    """The hub answered, but not with what was needed."""

    hint = "Try again later, or pick another repository."


class HubUnreachableError(HubError):
    """No answer from the hub at all (offline, DNS, firewall, proxy)."""

    hint = "Check the internet connection and try again. Everything else in Specula works offline."


@dataclass(frozen=True)
class RepoSummary:
    repo_id: str
    downloads: int
    likes: int
    license: str
    last_modified: datetime | None


@dataclass(frozen=True)
class HubFile:
    path: str  # inside the repository, possibly in a folder
    size: int
    sha256: str | None  # from the LFS metadata; GGUF files on the hub are always LFS

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


# Characters no file name may hold on some platform (Windows forbids the most) or that split
# a path there ('\\' and ':' included: 'C:x.gguf' is drive-relative on Windows).
_UNSAFE_CHARS = re.compile(r'[\x00-\x1f\x7f/\\:*?"<>|]')
_WINDOWS_DEVICES = re.compile(r"^(CON|PRN|AUX|NUL|COM[0-9]|LPT[0-9])(\.|$)", re.I)
MAX_NAME_CHARS = 200  # room for '.part' and '.download.json' under the usual 255-byte limit


def is_safe_file_name(name: str) -> bool:
    """True when name is one plain file name on every platform: `models / name` stays in models.

    Repository file names come from the hub, where anyone can upload: '..\\..\\evil.gguf',
    'C:\\x.gguf' or a UNC path would escape the models folder on Windows though they hold no '/'.
    """
    if not name or len(name) > MAX_NAME_CHARS or len(name.encode("utf-8", "replace")) > 250:
        return False
    if _UNSAFE_CHARS.search(name) or _WINDOWS_DEVICES.match(name):
        return False
    if name in (".", "..") or name != name.strip() or name.endswith("."):  # Windows drops trailing dots
        return False
    # Belt and braces: both path flavours must see exactly this one relative component.
    return all(not p.anchor and p.parts == (name,) for p in (PurePosixPath(name), PureWindowsPath(name)))


@dataclass(frozen=True)
class QuantGroup:
    """One downloadable model: a GGUF file, or all the parts of a split one."""

    quantization: str
    files: tuple[HubFile, ...]

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def label(self) -> str:
        first = self.files[0].name
        return f"{first} (+{len(self.files) - 1} parts)" if len(self.files) > 1 else first


@dataclass(frozen=True)
class RepoFiles:
    repo_id: str
    revision: str  # the commit: every file of a download comes from the same one
    groups: list[QuantGroup]


@dataclass(frozen=True)
class RepoDetails:
    """A repository's files, plus the header of its smallest model (fetched by Range) when readable:
    every quantization of a model shares its architecture and vocabulary, so one header serves
    the fit estimates (KV cache size) and the draft check for all of them."""

    files: RepoFiles
    header: GGUFInfo | None
    header_problem: str | None = None  # why there is no header


@dataclass(frozen=True)
class DraftSuggestion:
    repo: RepoSummary
    n_params: int | None  # read from the repository's name ("0.5B"): a guess until a header is read


def quantization_of(filename: str) -> str:
    """The quantization named in a GGUF file name ('…-Q4_K_M.gguf' -> 'Q4_K_M')."""
    found = _QUANT.findall(filename.rsplit("/", 1)[-1])
    return found[-1].upper() if found else "other"


def params_in_name(name: str) -> int | None:
    """'Qwen2.5-Coder-0.5B-Instruct' -> 500_000_000; None when the name gives no size."""
    m = _SIZE_IN_NAME.search(name)
    if not m:
        return None
    return int(float(m[1]) * (1e9 if m[2].upper() == "B" else 1e6))


def group_gguf_files(files: list[HubFile]) -> list[QuantGroup]:
    """GGUF files by model, split parts joined into one, smallest first; vision projectors left out."""
    singles: list[QuantGroup] = []
    splits: dict[tuple[str, int], list[HubFile]] = {}
    for f in files:
        if not f.path.lower().endswith(".gguf") or "mmproj" in f.name.lower() or not is_safe_file_name(f.name):
            continue
        parsed = split_part(f.path.rsplit("/", 1)[-1])
        if parsed:
            stem, _, count = parsed
            folder = f.path.rsplit("/", 1)[0] if "/" in f.path else ""
            splits.setdefault((f"{folder}/{stem}", count), []).append(f)
        else:
            singles.append(QuantGroup(quantization_of(f.path), (f,)))
    for (_, count), parts in splits.items():
        parts.sort(key=lambda f: f.path)
        if len(parts) == count:  # an incomplete set cannot be loaded; leave it out
            singles.append(QuantGroup(quantization_of(parts[0].path), tuple(parts)))
    return sorted(singles, key=lambda g: g.size)


# -- fit on this machine ---------------------------------------------------------------------


class Fit(str, Enum):
    FITS = "fits"
    TIGHT = "tight"
    WONT_FIT = "won't fit"
    UNKNOWN = "unknown"


# Without a header: 128 KiB per token is what a 7-8B model with grouped-query attention needs
# (f16 K and V); smaller models need less, so this errs on the safe side.
FALLBACK_KV_BYTES_PER_TOKEN = 128 << 10
# Compute buffers and the runtime itself, on top of weights and KV cache.
OVERHEAD_BYTES = 512 << 20
COMFORTABLE_SHARE = 0.75  # above this share of free memory, the machine starts to struggle


@dataclass(frozen=True)
class MachineMemory:
    free_ram: int | None
    free_vram: int | None = None  # only where a tool reports it (nvidia-smi)


def machine_memory() -> MachineMemory:
    return MachineMemory(_free_ram(), _free_vram())


def _free_ram() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None  # macOS and Windows have no such sysconf name; the fit shows "unknown"


def _free_vram() -> int | None:
    tool = shutil.which("nvidia-smi")
    if not tool:
        return None
    try:
        out = subprocess.run(
            [tool, "--query-gpu=memory.free", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout
        return sum(int(line) for line in out.split()) << 20  # MiB per GPU
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def estimate_fit(file_size: int, n_ctx: int, kv_bytes_per_token: int | None, memory: MachineMemory) -> Fit:
    """Weights + KV cache for n_ctx tokens + overhead, against free RAM and VRAM together
    (llama.cpp splits layers between GPU and CPU, so both count)."""
    if memory.free_ram is None and memory.free_vram is None:
        return Fit.UNKNOWN
    need = file_size + n_ctx * (kv_bytes_per_token or FALLBACK_KV_BYTES_PER_TOKEN) + OVERHEAD_BYTES
    free = (memory.free_ram or 0) + (memory.free_vram or 0)
    if need <= free * COMFORTABLE_SHARE:
        return Fit.FITS
    return Fit.TIGHT if need <= free else Fit.WONT_FIT


# -- the hub ---------------------------------------------------------------------------------


class Hub:
    """Calls to the hub. Each call blocks: run them off the GUI thread."""

    def __init__(self, endpoint: str | None = None):
        # HF_ENDPOINT is read now rather than at import, so it can be set after huggingface_hub loads.
        self.endpoint = (endpoint or os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")
        self._api = HfApi(endpoint=self.endpoint)

    def search(self, text: str, sort: str = "downloads", limit: int = 50) -> list[RepoSummary]:
        """GGUF repositories matching text, most downloaded (or liked, or recent) first."""
        # list_models retries a refused connection with backoff for ~30 s: ask once, quickly, first.
        self._check_reachable()
        with hub_errors("search the model hub"):
            models = self._api.list_models(
                search=text or None,
                filter="gguf",
                sort=SORTS[sort],
                limit=limit,
                expand=["downloads", "likes", "lastModified", "tags"],
            )
            return [_summary(m) for m in models]

    def repo_files(self, repo_id: str) -> RepoFiles:
        """The repository's GGUF models with sizes and SHA-256, grouped by quantization."""
        with hub_errors(f"list the files of {repo_id}"):
            info = self._api.model_info(repo_id, files_metadata=True, timeout=TIMEOUT.read)
        files = [
            HubFile(s.rfilename, s.size or (s.lfs.size if s.lfs else 0), s.lfs.sha256 if s.lfs else None)
            for s in info.siblings or []
        ]
        return RepoFiles(repo_id, info.sha or "main", group_gguf_files(files))

    def repo_details(self, repo_id: str) -> RepoDetails:
        files = self.repo_files(repo_id)
        if not files.groups:
            return RepoDetails(files, None, "the repository has no GGUF model files")
        try:
            header = self.fetch_header(repo_id, files.groups[0].files[0].path, files.revision)
        except (HubError, ModelFileError) as e:
            return RepoDetails(files, None, str(e))
        return RepoDetails(files, header)

    def file_url(self, repo_id: str, path: str, revision: str) -> str:
        return hf_hub_url(repo_id, path, revision=revision, endpoint=self.endpoint)

    def fetch_header(self, repo_id: str, path: str, revision: str = "main") -> GGUFInfo:
        """A remote GGUF file's header, fetched with HTTP Range requests: only the first megabytes."""
        url = self.file_url(repo_id, path, revision)
        data, total, want = bytearray(), None, HEADER_FIRST_FETCH
        while True:
            total = self._fetch_range(url, data, want) or total
            try:
                return parse_header(io.BytesIO(bytes(data)), path.rsplit("/", 1)[-1], total)
            except HeaderIncomplete:
                if (total is not None and len(data) >= total) or want >= HEADER_MAX_BYTES:
                    raise HubError(f"The header of {path} is larger than {want >> 20} MB or cut off.") from None
                want *= 2

    def _fetch_range(self, url: str, data: bytearray, end: int) -> int | None:
        """Append bytes len(data)..end-1 of url to data; return the file's total size if given."""
        headers = {**build_hf_headers(), "Range": f"bytes={len(data)}-{end - 1}"}
        with (
            hub_errors("read the model's header"),
            get_session().stream("GET", url, headers=headers, timeout=TIMEOUT) as response,
        ):
            raise_for_status(response)
            if response.status_code == 200:  # the server ignored Range: take the start of the body
                data.clear()
            for chunk in response.iter_bytes():
                data += chunk[: end - len(data)]
                if len(data) >= end:
                    break
            content_range = response.headers.get("Content-Range", "")
        return int(content_range.rsplit("/", 1)[1]) if "/" in content_range else None

    def check_draft(self, target: VocabInfo, repo_id: str, path: str, revision: str = "main") -> str | None:
        """Why the remote file cannot draft for target (None: it can), from its header alone."""
        return incompatibility(target, VocabInfo.from_header(self.fetch_header(repo_id, path, revision)))

    def suggest_drafts(self, target: ModelEntry, limit: int = 20) -> list[DraftSuggestion]:
        """GGUF repositories of the target's family that are smaller than it, best sized first."""
        # Sizes are compared name to name ("0.5B" vs "1.5B"): a header's exact count runs higher.
        target_params = params_in_name(target.name) or target.n_params
        found = []
        for repo in self.search(target.family or target.architecture, "downloads", limit=100):
            n_params = params_in_name(repo.repo_id.split("/")[-1])
            if n_params is not None and n_params < target_params:
                found.append(DraftSuggestion(repo, n_params))
        found.sort(key=lambda s: (draft_size_distance(target_params, s.n_params), -s.repo.downloads))
        return found[:limit]

    def _check_reachable(self) -> None:
        with hub_errors("reach the model hub"):
            get_session().head(self.endpoint, headers=build_hf_headers(), timeout=TIMEOUT)


def _summary(m) -> RepoSummary:
    tags = m.tags or []
    license_ = next((t.split(":", 1)[1] for t in tags if t.startswith("license:")), "")
    if not license_ and m.card_data is not None:
        license_ = str(m.card_data.get("license") or "")
    return RepoSummary(m.id, m.downloads or 0, m.likes or 0, license_, m.last_modified)


def raise_for_status(response: httpx2.Response) -> None:
    if response.status_code >= 400:
        response.read()  # a streamed error body must be read before huggingface_hub looks at it
    hf_raise_for_status(response)


@contextmanager
def hub_errors(doing: str) -> Iterator[None]:
    """Turn huggingface_hub and httpx failures into HubError with a message for people."""
    try:
        yield
    except OfflineModeIsEnabled:
        raise HubUnreachableError(
            f"Could not {doing}: offline mode is on (HF_HUB_OFFLINE is set).",
            hint="Unset HF_HUB_OFFLINE to use the downloader.",
        ) from None
    except (GatedRepoError, RepositoryNotFoundError) as e:
        repo = getattr(e, "repo_id", None) or "The repository"
        raise HubError(
            f"Could not {doing}: {repo} does not exist, is private, or is gated (needs accepting its licence).",
            hint="Check the name; for a gated model, accept its terms on the hub and log in (hf auth login).",
        ) from None
    except RevisionNotFoundError:
        raise HubError(f"Could not {doing}: the repository changed while Specula was reading it.") from None
    except HfHubHTTPError as e:
        status = e.response.status_code if e.response is not None else "?"
        raise HubError(f"Could not {doing}: the hub answered with HTTP {status}.") from None
    except (httpx2.TransportError, ConnectionError, TimeoutError) as e:
        raise HubUnreachableError(f"The model hub could not be reached ({_reason(e)}).") from None


def _reason(error: Exception) -> str:
    if isinstance(error, httpx2.TimeoutException):
        return "no answer in time"
    text = re.sub(r"^\[Errno -?\d+\]\s*", "", str(error)) or type(error).__name__
    return text if len(text) < 120 else text[:117] + "…"
