"""Resumable, verified downloads of GGUF models from the hub into the models folder.

Bytes go to '<name>.part' beside the destination and a '<name>.download.json' record says what
they belong to, so a paused download, a dropped connection or an app restart all continue with
an HTTP Range request from the part file's size. The SHA-256 is computed while the bytes arrive
(the part already on disk is hashed first when resuming) and compared with the hub's LFS
metadata; only a verified file is renamed into place, atomically.

Why not hf_hub_download: it writes into the HF cache (or a local_dir with its own metadata
folder), offers no pause or cancel, reports progress only through tqdm, and does not check
SHA-256. Its URL builder, shared HTTP session and error types are used instead.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from enum import Enum
from pathlib import Path

import httpx2
from huggingface_hub.utils import build_hf_headers, get_session

from engine.json_file import write_json
from engine.models.hub import TIMEOUT, Hub, HubError, HubFile, hub_errors, is_safe_file_name, raise_for_status
from engine.models.library import PENDING_SUFFIX

DISK_MARGIN = 256 << 20  # leave this much free after the download
PROGRESS_INTERVAL_S = 0.1  # progress is reported at most this often (plus first and last)
SPEED_WINDOW_S = 5.0
HASH_CHUNK = 8 << 20


class DownloadError(HubError):
    hint = "The partial file is kept: resume the download to continue where it stopped."


class NotEnoughDiskError(DownloadError):
    hint = "Free some disk space, or remove models you no longer use, then try again."


class HashMismatchError(DownloadError):
    hint = "The damaged file was deleted. Download it again; if this repeats, report it to the repository's owner."


class Outcome(str, Enum):
    DONE = "done"
    PAUSED = "paused"  # the part file stays; run() again to resume
    CANCELLED = "cancelled"  # the part file is gone


@dataclass(frozen=True)
class Progress:
    phase: str  # "checking" (hashing a part file before resuming) or "downloading"
    done: int
    total: int
    speed: float  # bytes per second over the last few seconds of transfer
    eta_s: float | None

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 0.0


@dataclass(frozen=True)
class DownloadRecord:
    """What a part file belongs to: enough to resume after a restart."""

    repo_id: str
    revision: str
    files: tuple[HubFile, ...]

    @property
    def name(self) -> str:
        return self.files[0].name

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)


class Download:
    """One model (a file, or every part of a split one) from a repository into dest_dir.

    run() blocks and may run on any thread; pause() and cancel() may be called from another.
    """

    def __init__(self, record: DownloadRecord, dest_dir: Path, hub: Hub | None = None):
        self.record = record
        self.dest_dir = Path(dest_dir)
        self.hub = hub or Hub()
        self._stop = threading.Event()
        self._cancel = threading.Event()
        self._response = None  # the transfer in progress: a pause interrupts a read stalled on the network

    @property
    def path(self) -> Path:
        """Where the model lands (the first part, for a split model)."""
        return self._dest(self.record.files[0])

    def pause(self) -> None:
        """Stop soon (run() returns PAUSED, the part file kept): at the next bytes, or at once when
        the transfer is stalled in a read, by shutting its socket (any thread may call this)."""
        self._stop.set()
        _interrupt(self._response)

    def cancel(self) -> None:
        self._cancel.set()
        self.pause()

    def run(self, on_progress: Callable[[Progress], None] | None = None) -> Outcome:
        if self._cancel.is_set():  # cancelled before it (re)started
            self.discard()
            return Outcome.CANCELLED
        self._stop.clear()  # a pause ends when run() is called again
        with _disk_errors(self.dest_dir):
            self.dest_dir.mkdir(parents=True, exist_ok=True)
            landed = [self._landed(f) for f in self.record.files]  # refuses to overwrite others' files
            self._check_disk_space()
            _write_record(self._record_path(), self.record)
            meter = _Meter(self.record.size, on_progress)
            meter.done = sum(_bytes_present(self._dest(f)) for f in self.record.files)
            for file, already in zip(self.record.files, landed, strict=True):
                # A part that landed in an earlier run was verified then.
                if not already and not self._fetch(file, meter):
                    if self._cancel.is_set():
                        self.discard()
                        return Outcome.CANCELLED
                    return Outcome.PAUSED
        self._record_path().unlink(missing_ok=True)
        meter.report(force=True)
        return Outcome.DONE

    def discard(self) -> None:
        """Delete what a paused or failed download left behind."""
        for file in self.record.files:
            _part(self._dest(file)).unlink(missing_ok=True)
        self._record_path().unlink(missing_ok=True)

    def _landed(self, file: HubFile) -> bool:
        dest = self._dest(file)
        if not dest.exists():
            return False
        if dest.stat().st_size != file.size:
            raise DownloadError(
                f"A different file named {file.name} is already in {self.dest_dir}.",
                hint="Remove it from the library (or rename it), then download again.",
            )
        return True

    def _dest(self, file: HubFile) -> Path:
        """Every path a download writes or deletes comes from here: never outside dest_dir."""
        if not is_safe_file_name(file.name):
            raise DownloadError(
                f"The repository names a file {file.name!r}, which is not a plain file name: "
                "Specula writes only inside its models folder.",
                hint="Pick another file or repository.",
            )
        return self.dest_dir / file.name

    def _record_path(self) -> Path:
        return self._dest(self.record.files[0]).with_name(self.record.name + PENDING_SUFFIX)

    def _check_disk_space(self) -> None:
        needed = sum(f.size - _bytes_present(self._dest(f)) for f in self.record.files)
        free = shutil.disk_usage(self.dest_dir).free
        if needed + DISK_MARGIN > free:
            raise NotEnoughDiskError(
                f"{self.record.name} needs {_gb(needed)} more, but only {_gb(free)} is free in {self.dest_dir}."
            )

    def _fetch(self, file: HubFile, meter: _Meter) -> bool:
        """Download one file into place; False when stopped (paused or cancelled) first."""
        dest, part = self._dest(file), _part(self._dest(file))
        have = part.stat().st_size if part.exists() else 0
        if have > file.size:  # not ours, or the upstream file changed: start over
            part.unlink()
            meter.done -= have
            have = 0
        digest = hashlib.sha256()
        if have and not self._hash_existing(part, digest, meter):
            return False
        if have < file.size:
            have, digest = self._stream(file, part, have, digest, meter)
            if self._stop.is_set():
                return False
            if have != file.size:
                raise DownloadError(f"The connection ended after {_gb(have)} of {file.name}'s {_gb(file.size)}.")
        if file.sha256 and digest.hexdigest() != file.sha256.lower():
            part.unlink(missing_ok=True)
            if not any(_part(self._dest(f)).exists() for f in self.record.files):
                self._record_path().unlink(missing_ok=True)
            raise HashMismatchError(
                f"{file.name} is damaged: its SHA-256 is {digest.hexdigest()[:16]}…, "
                f"the hub says {file.sha256[:16]}…. The file was deleted."
            )
        os.replace(part, dest)
        return True

    def _hash_existing(self, part: Path, digest, meter: _Meter) -> bool:
        meter.phase = "checking"
        with open(part, "rb") as f:
            while chunk := f.read(HASH_CHUNK):
                digest.update(chunk)
                meter.report()
                if self._stop.is_set():
                    return False
        return True

    def _stream(self, file: HubFile, part: Path, have: int, digest, meter: _Meter):
        """Append the rest of file to part from byte have; returns (the part's size, its digest)."""
        url = self.hub.file_url(self.record.repo_id, file.path, self.record.revision)
        headers = build_hf_headers()
        if have:
            headers["Range"] = f"bytes={have}-"
        meter.phase = "downloading"
        with (
            hub_errors(f"download {file.name}"),
            _connection_lost(file.name),
            get_session().stream("GET", url, headers=headers, timeout=TIMEOUT) as response,
        ):
            raise_for_status(response)
            if have and response.status_code != 206:  # Range ignored: the body starts at byte 0
                meter.done -= have
                have, digest = 0, hashlib.sha256()
            self._response = response
            try:
                if self._stop.is_set():  # paused while connecting, before there was a socket to shut
                    return have, digest
                with open(part, "ab" if have else "wb") as out:
                    for chunk in response.iter_bytes():
                        out.write(chunk)
                        out.flush()  # what was received is on disk, not in a buffer, while a read stalls
                        digest.update(chunk)
                        have += len(chunk)
                        meter.add(len(chunk))
                        if self._stop.is_set():
                            break
            except httpx2.TransportError:
                if not self._stop.is_set():
                    raise
                # pause() shut the socket mid-read: every byte received so far is in the part file.
            finally:
                self._response = None
        return have, digest


def pending_downloads(dest_dir: Path) -> list[DownloadRecord]:
    """Downloads that stopped before finishing (paused, failed, or the app closed), to resume."""
    records = []
    for path in sorted(Path(dest_dir).glob("*" + PENDING_SUFFIX)):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            files = tuple(HubFile(**f) for f in data["files"])
            if not all(is_safe_file_name(f.name) for f in files):
                continue  # a record naming a path outside this folder: never resumed, never deleted through
            records.append(DownloadRecord(data["repo_id"], data["revision"], files))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not readable: it cannot be resumed, and the part files are only bytes
    return records


def bytes_present(record: DownloadRecord, dest_dir: Path) -> int:
    """How much of a pending download is already on disk."""
    return sum(_bytes_present(Path(dest_dir) / f.name) for f in record.files if is_safe_file_name(f.name))


class _Meter:
    """Counts bytes, measures speed over a sliding window, and reports at a bounded rate."""

    def __init__(self, total: int, callback: Callable[[Progress], None] | None):
        self.total, self.callback = total, callback
        self.done, self.phase = 0, "downloading"
        self._samples: deque[tuple[float, int]] = deque()
        self._fetched = 0  # this session's bytes only: resumed bytes are not speed
        self._last_report: float | None = None

    def add(self, n: int) -> None:
        self.done += n
        self._fetched += n
        now = time.monotonic()
        self._samples.append((now, self._fetched))
        while self._samples and now - self._samples[0][0] > SPEED_WINDOW_S:
            self._samples.popleft()
        self.report()

    def speed(self) -> float:
        if len(self._samples) < 2:
            return 0.0
        (t0, b0), (t1, b1) = self._samples[0], self._samples[-1]
        return (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0

    def report(self, force: bool = False) -> None:
        now = time.monotonic()
        # The first report comes at once: a caller sees bytes on disk as soon as there are some.
        if not self.callback or not (
            force or self._last_report is None or now - self._last_report >= PROGRESS_INTERVAL_S
        ):
            return
        self._last_report = now
        speed = self.speed()
        eta = (self.total - self.done) / speed if speed > 0 else None
        self.callback(Progress(self.phase, self.done, self.total, speed, eta))


def _interrupt(response) -> None:
    """Wake a read blocked on response's connection (shutdown, unlike close, does so from any thread)."""
    if response is None:
        return
    stream = response.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if sock is not None:
        with suppress(OSError):  # already closed: nothing to wake
            sock.shutdown(socket.SHUT_RDWR)


def _part(dest: Path) -> Path:
    return dest.with_name(dest.name + ".part")


def _bytes_present(dest: Path) -> int:
    for path in (dest, _part(dest)):
        if path.exists():
            return path.stat().st_size
    return 0


def _write_record(path: Path, record: DownloadRecord) -> None:
    data = {"repo_id": record.repo_id, "revision": record.revision, "files": [asdict(f) for f in record.files]}
    write_json(path, data)


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


@contextmanager
def _connection_lost(name: str) -> Iterator[None]:
    """A connection that drops mid-transfer is not 'unreachable': say that the part file is kept."""
    try:
        yield
    except (httpx2.ReadError, httpx2.RemoteProtocolError, httpx2.ReadTimeout):
        raise DownloadError(f"The connection to the hub was lost while downloading {name}.") from None


@contextmanager
def _disk_errors(folder: Path) -> Iterator[None]:
    # Network failures arrive here already as HubError; an OSError left is the disk's.
    try:
        yield
    except OSError as e:
        raise DownloadError(
            f"Could not write to {folder}: {e.strerror or e}.", hint="Check free space and permissions."
        ) from None
