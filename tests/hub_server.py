"""A local stand-in for the Hugging Face hub, so the real huggingface_hub client can be tested.

It answers what Specula's hub code calls, in the shapes huggingface_hub 2.x parses:
  GET  /api/models?search=&filter=gguf&sort=&limit=&expand=     list_models
  GET  /api/models/{repo}[/revision/{rev}]?blobs=True            model_info(files_metadata=True)
  HEAD|GET /{repo}/resolve/{rev}/{path}                          302 to /cdn/{sha256}, with the
       X-Repo-Commit, X-Linked-Etag and X-Linked-Size headers the hub sends for LFS files
  HEAD|GET /cdn/{sha256}                                         the bytes, with Range support
File bytes are read from real GGUF files on disk (whole files or slices). Every body it sends is
logged, so tests can count exactly which bytes went over the wire. It binds 127.0.0.1 on an
ephemeral port only and is stopped by the fixture that started it.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

from engine.models import starter
from tests import models

CHUNK = 1 << 20


@dataclass(frozen=True)
class FakeFile:
    path: str  # inside the repository
    source: Path
    offset: int = 0
    length: int | None = None  # None: to the end of source
    sha256: str | None = None  # None: computed from the bytes
    lfs: bool = True  # the hub keeps large files in LFS; small text files are plain git blobs

    @property
    def size(self) -> int:
        return self.length if self.length is not None else self.source.stat().st_size - self.offset

    @property
    def digest(self) -> str:
        return self.sha256 or _sha256_of(self.source, self.offset, self.size)


@dataclass
class FakeRepo:
    repo_id: str
    files: list[FakeFile]
    downloads: int
    likes: int
    license: str
    last_modified: str
    sha: str = "0123456789abcdef0123456789abcdef01234567"


@dataclass(frozen=True)
class Served:
    method: str
    path: str  # the file's repository path, for file bodies
    start: int  # first byte of the body
    sent: int  # body bytes written


@dataclass
class FakeHub:
    repos: list[FakeRepo]
    log: list[Served] = field(default_factory=list)
    corrupt: dict[str, int] = field(default_factory=dict)  # file path -> offset of a flipped byte
    cut_after: dict[str, int] = field(default_factory=dict)  # file path -> drop the connection after n bytes
    hold_at: dict[str, tuple[int, threading.Event]] = field(default_factory=dict)  # stall at offset until set
    requests: list[str] = field(default_factory=list)  # every request line, for debugging failures

    def __enter__(self) -> FakeHub:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="fake-hub", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def bytes_served(self, path: str) -> int:
        return sum(s.sent for s in self.log if s.path == path)

    def body_requests(self, path: str) -> list[Served]:
        return [s for s in self.log if s.path == path and s.method == "GET"]

    def repo(self, repo_id: str) -> FakeRepo | None:
        return next((r for r in self.repos if r.repo_id == repo_id), None)

    def file_by_sha(self, sha: str) -> FakeFile | None:
        return next((f for r in self.repos for f in r.files if f.digest == sha), None)


def _handler_for(hub: FakeHub):
    class Handler(_HubHandler):
        pass

    Handler.hub = hub
    return Handler


class _HubHandler(BaseHTTPRequestHandler):
    hub: FakeHub
    protocol_version = "HTTP/1.0"  # one request per connection: no idle threads linger after a test

    def log_message(self, *args) -> None:
        pass

    def do_HEAD(self) -> None:
        self._route(head=True)

    def do_GET(self) -> None:
        self._route(head=False)

    def _route(self, head: bool) -> None:
        self.hub.requests.append(f"{self.command} {self.path} Range={self.headers.get('Range')}")
        url = urlsplit(self.path)
        path, query = unquote(url.path), parse_qs(url.query)
        if path == "/":
            return self._send(200, b"fake hub", "text/plain", head)
        if path == "/api/models":
            return self._json(self._search(query), head)
        if m := re.fullmatch(r"/api/models/([^/]+/[^/]+?)(?:/revision/([^/]+))?", path):
            repo = self.hub.repo(m[1])
            return self._json(_repo_json(repo, "blobs" in query), head) if repo else self._not_found(m[1], head)
        if m := re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path):
            return self._resolve(m[1], m[3], head)
        if m := re.fullmatch(r"/cdn/([0-9a-f]{64})", path):
            file = self.hub.file_by_sha(m[1])
            return self._file(file, head) if file else self._send(404, b"no such blob", "text/plain", head)
        return self._send(404, b"not found", "text/plain", head)

    def _search(self, query: dict) -> list[dict]:
        text = query.get("search", [""])[0].lower()
        wanted = [r for r in self.hub.repos if text in r.repo_id.lower() and "gguf" in query.get("filter", [])]
        sort = query.get("sort", ["downloads"])[0]
        key = {"downloads": "downloads", "likes": "likes", "lastModified": "last_modified"}[sort]
        wanted.sort(key=lambda r: getattr(r, key), reverse=True)
        limit = int(query.get("limit", ["1000"])[0])
        return [_summary_json(r) for r in wanted[:limit]]

    def _resolve(self, repo_id: str, file_path: str, head: bool) -> None:
        repo = self.hub.repo(repo_id)
        file = next((f for f in repo.files if f.path == file_path), None) if repo else None
        if file is None:
            return self._not_found(repo_id, head, "EntryNotFound")
        self.send_response(302)
        self.send_header("Location", f"/cdn/{file.digest}")
        self.send_header("X-Repo-Commit", repo.sha)
        self.send_header("X-Linked-Etag", f'"{file.digest}"')
        self.send_header("X-Linked-Size", str(file.size))
        self.send_header("ETag", f'"{file.digest}"')
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _file(self, file: FakeFile, head: bool) -> None:
        size, start, end = file.size, 0, file.size - 1
        range_header = self.headers.get("Range")
        if range_header:
            m = re.fullmatch(r"bytes=(\d+)-(\d*)", range_header)
            start = int(m[1])
            end = min(int(m[2]), size - 1) if m[2] else size - 1
            if start >= size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
        self.send_response(206 if range_header else 200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", f'"{file.digest}"')
        self.send_header("Content-Length", str(end - start + 1))
        if range_header:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.end_headers()
        if not head:
            self._send_body(file, start, end + 1)

    def _send_body(self, file: FakeFile, start: int, stop: int) -> None:
        limit = self.hub.cut_after.pop(file.path, None)
        flip = self.hub.corrupt.get(file.path)
        hold, gate = self.hub.hold_at.get(file.path, (None, None))
        sent = 0
        try:
            with open(file.source, "rb") as f:
                f.seek(file.offset + start)
                position = start
                while position < stop and (limit is None or sent < limit):
                    if hold is not None and position >= hold:
                        gate.wait(timeout=30)  # a stalled transfer, until the test lets it go on
                        hold = None
                    n = min(CHUNK, stop - position, limit - sent if limit is not None else CHUNK)
                    if hold is not None and position < hold:
                        n = min(n, hold - position)
                    chunk = bytearray(f.read(n))
                    if flip is not None and position <= flip < position + len(chunk):
                        chunk[flip - position] ^= 0xFF
                    self.wfile.write(chunk)
                    sent += len(chunk)
                    position += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client stopped reading (a pause): count what was written
        finally:
            self.hub.log.append(Served(self.command, file.path, start, sent))
        if limit is not None:
            self.close_connection = True  # a dropped connection, mid-body

    def _json(self, data, head: bool) -> None:
        self._send(200, json.dumps(data).encode(), "application/json", head)

    def _not_found(self, repo_id: str, head: bool, code: str = "RepoNotFound") -> None:
        self.send_response(404)
        self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", f"{repo_id}: not found")
        body = json.dumps({"error": "Repository not found"}).encode()
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _send(self, status: int, body: bytes, content_type: str, head: bool) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)


def _summary_json(repo: FakeRepo) -> dict:
    return {
        "_id": repo.repo_id,
        "id": repo.repo_id,
        "downloads": repo.downloads,
        "likes": repo.likes,
        "lastModified": repo.last_modified,
        "tags": ["gguf", f"license:{repo.license}", "text-generation"],
        "private": False,
    }


def _repo_json(repo: FakeRepo, blobs: bool) -> dict:
    siblings = []
    for f in repo.files:
        sibling = {"rfilename": f.path}
        if blobs:
            sibling["size"] = f.size
            sibling["blobId"] = hashlib.sha1(f.digest.encode()).hexdigest()
            if f.lfs:
                sibling["lfs"] = {"sha256": f.digest, "size": f.size, "pointerSize": 135}
        siblings.append(sibling)
    return {
        **_summary_json(repo),
        "sha": repo.sha,
        "cardData": {"license": repo.license},
        "siblings": siblings,
        "createdAt": repo.last_modified,
    }


@cache
def _sha256_of(path: Path, offset: int, length: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        f.seek(offset)
        remaining = length
        while remaining and (chunk := f.read(min(CHUNK * 8, remaining))):
            digest.update(chunk)
            remaining -= len(chunk)
    return digest.hexdigest()


# -- the standard hub the tests use ----------------------------------------------------------

SMOL_REPO = "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF"
SMOL_SPLIT_REPO = "specula-test/SmolLM2-135M-split-GGUF"
QWEN_TARGET_REPO = "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF"
QWEN_DRAFT_REPO = "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF"


def _date(year: int, month: int) -> str:
    return datetime(year, month, 1, tzinfo=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def standard_repos(smollm2: Path, qwen_target: Path, qwen_draft: Path) -> list[FakeRepo]:
    """SmolLM2 whole and as a two-part split; the Qwen pair, the target also as a split Q8_0 stand-in."""
    smol_size = smollm2.stat().st_size
    half = smol_size // 2
    target_size = qwen_target.stat().st_size
    return [
        FakeRepo(
            SMOL_REPO,
            [FakeFile(smollm2.name, smollm2, sha256=models.SMOLLM2_SHA256)],
            downloads=5_000,
            likes=40,
            license="apache-2.0",
            last_modified=_date(2025, 2),
        ),
        FakeRepo(
            SMOL_SPLIT_REPO,
            [
                FakeFile("Q4_1/SmolLM2-135M-Q4_1-00001-of-00002.gguf", smollm2, 0, half),
                FakeFile("Q4_1/SmolLM2-135M-Q4_1-00002-of-00002.gguf", smollm2, half, smol_size - half),
            ],
            downloads=10,
            likes=1,
            license="apache-2.0",
            last_modified=_date(2025, 6),
        ),
        FakeRepo(
            QWEN_TARGET_REPO,
            [
                FakeFile(qwen_target.name, qwen_target, sha256=starter.TARGET.sha256),
                # Slices of the real file: the first carries the real header, like a gguf-split part.
                # Never downloaded whole in tests, so made-up hashes spare hashing 1 GB.
                FakeFile("qwen2.5-coder-1.5b-instruct-q8_0-00001-of-00002.gguf", qwen_target, 0, 600_000_000, "d" * 64),
                FakeFile(
                    "qwen2.5-coder-1.5b-instruct-q8_0-00002-of-00002.gguf",
                    qwen_target,
                    600_000_000,
                    target_size - 600_000_000,
                    "f" * 64,
                ),
                FakeFile("README.md", qwen_target, 0, 64, "e" * 64, lfs=False),
            ],
            downloads=90_000,
            likes=120,
            license="apache-2.0",
            last_modified=_date(2024, 11),
        ),
        FakeRepo(
            QWEN_DRAFT_REPO,
            [FakeFile(qwen_draft.name, qwen_draft, sha256=starter.DRAFT.sha256)],
            downloads=70_000,
            likes=300,
            license="apache-2.0",
            last_modified=_date(2024, 12),
        ),
    ]


@pytest.fixture(name="fake_hub")
def fake_hub_fixture(monkeypatch, smollm2_path, qwen_paths):
    """The standard fake hub, running, with HF_ENDPOINT pointing at it.

    Test modules import this function to use the `fake_hub` fixture (tests/conftest.py is shared).
    """
    target, draft = map(Path, qwen_paths)
    with FakeHub(standard_repos(Path(smollm2_path), target, draft)) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
        yield hub
