"""Search, file lists, header-only checks and downloads: the real huggingface_hub client
against tests/hub_server.py, which serves real GGUF bytes from 127.0.0.1."""

import hashlib
import socket
from pathlib import Path

import pytest

import engine.models.download
from engine.gguf.header import read_header
from engine.gguf.pairing import VocabInfo
from engine.models.download import (
    Download,
    DownloadError,
    DownloadRecord,
    HashMismatchError,
    NotEnoughDiskError,
    Outcome,
    pending_downloads,
)
from engine.models.hub import (
    Fit,
    Hub,
    HubError,
    HubFile,
    HubUnreachableError,
    MachineMemory,
    estimate_fit,
    group_gguf_files,
    quantization_of,
)
from engine.models.library import ModelLibrary
from tests import models
from tests.hub_server import (
    QWEN_DRAFT_REPO,
    QWEN_TARGET_REPO,
    SMOL_REPO,
    SMOL_SPLIT_REPO,
    fake_hub_fixture,  # noqa: F401  (the fake_hub fixture)
)

SMOL = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOL_SIZE = 98_362_432


def smol_download(hub: Hub, dest: Path) -> Download:
    files = hub.repo_files(SMOL_REPO)
    return Download(DownloadRecord(files.repo_id, files.revision, files.groups[0].files), dest, hub)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_search_lists_gguf_repositories_sorted(fake_hub):
    hub = Hub()
    by_downloads = hub.search("qwen2.5-coder")
    assert [r.repo_id for r in by_downloads] == [QWEN_TARGET_REPO, QWEN_DRAFT_REPO]
    first = by_downloads[0]
    assert (first.downloads, first.likes, first.license) == (90_000, 120, "apache-2.0")
    assert (first.last_modified.year, first.last_modified.month) == (2024, 11)

    assert [r.repo_id for r in hub.search("qwen", sort="likes")] == [QWEN_DRAFT_REPO, QWEN_TARGET_REPO]
    assert hub.search("smollm2", sort="recent")[0].repo_id == SMOL_SPLIT_REPO
    assert hub.search("no such model") == []


def test_repo_files_grouped_by_quantization_with_sizes_and_hashes(fake_hub):
    files = Hub().repo_files(QWEN_TARGET_REPO)
    assert files.revision == fake_hub.repo(QWEN_TARGET_REPO).sha
    assert [(g.quantization, len(g.files)) for g in files.groups] == [("Q4_K_M", 1), ("Q8_0", 2)]
    q4 = files.groups[0]
    assert q4.size == 1_117_320_768
    assert q4.files[0].sha256 == "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    assert files.groups[1].label == "qwen2.5-coder-1.5b-instruct-q8_0-00001-of-00002.gguf (+1 parts)"
    assert files.groups[1].size == 1_117_320_768  # both parts together


def test_grouping_rules():
    def f(path, size=10):
        return HubFile(path, size, None)

    groups = group_gguf_files(
        [
            f("m-Q4_K_M.gguf", 30),
            f("Q8_0/m-Q8_0-00001-of-00003.gguf"),
            f("Q8_0/m-Q8_0-00002-of-00003.gguf"),  # part 3 missing: not loadable, left out
            f("big/m-F16-00002-of-00002.gguf"),
            f("big/m-F16-00001-of-00002.gguf"),
            f("mmproj-m-f16.gguf"),
            f("config.json"),
        ]
    )
    assert [(g.quantization, [p.name for p in g.files]) for g in groups] == [
        ("F16", ["m-F16-00001-of-00002.gguf", "m-F16-00002-of-00002.gguf"]),
        ("Q4_K_M", ["m-Q4_K_M.gguf"]),
    ]
    assert quantization_of("Llama-3.2-1B-Instruct-IQ4_XS.gguf") == "IQ4_XS"
    assert quantization_of("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf") == "Q4_K_M"
    assert quantization_of("model-bf16.gguf") == "BF16"
    assert quantization_of("model.gguf") == "other"


def test_fit_estimate():
    gb = 1 << 30
    memory = MachineMemory(free_ram=8 * gb)
    assert estimate_fit(2 * gb, 4096, 28_672, memory) is Fit.FITS
    assert estimate_fit(6 * gb, 4096, 28_672, memory) is Fit.TIGHT
    assert estimate_fit(6 * gb, 32768, 131_072, memory) is Fit.WONT_FIT
    # VRAM adds to RAM: llama.cpp can split the layers between them.
    assert estimate_fit(6 * gb, 4096, 28_672, MachineMemory(8 * gb, 8 * gb)) is Fit.FITS
    assert estimate_fit(gb, 4096, None, MachineMemory(None)) is Fit.UNKNOWN


def test_download_verifies_and_lands_atomically(fake_hub, tmp_path):
    seen = []
    download = smol_download(Hub(), tmp_path)
    assert download.run(seen.append) is Outcome.DONE

    assert [p.name for p in tmp_path.iterdir()] == [SMOL]
    assert sha256(tmp_path / SMOL) == models.SMOLLM2_SHA256
    assert fake_hub.bytes_served(SMOL) == SMOL_SIZE
    assert seen[-1].done == seen[-1].total == SMOL_SIZE
    assert all(a.done <= b.done for a, b in zip(seen, seen[1:], strict=False))


def test_pause_then_resume_after_restart_fetches_no_byte_twice(fake_hub, tmp_path):
    download = smol_download(Hub(), tmp_path)
    assert download.run(lambda progress: download.pause()) is Outcome.PAUSED
    part = tmp_path / (SMOL + ".part")
    kept = part.stat().st_size
    assert 0 < kept < SMOL_SIZE
    assert not (tmp_path / SMOL).exists()

    # "Restart": a new Hub and a Download rebuilt from the record on disk alone.
    [record] = pending_downloads(tmp_path)
    assert record.files[0].sha256 == models.SMOLLM2_SHA256
    assert Download(record, tmp_path, Hub()).run() is Outcome.DONE

    first, second = fake_hub.body_requests(SMOL)
    assert second.start == kept  # a Range request from the part file's size
    assert second.sent == SMOL_SIZE - kept
    assert sha256(tmp_path / SMOL) == models.SMOLLM2_SHA256
    assert pending_downloads(tmp_path) == []


def test_dropped_connection_keeps_the_part_and_resumes(fake_hub, tmp_path):
    fake_hub.cut_after[SMOL] = 10_000_000
    with pytest.raises(DownloadError, match="connection") as failure:
        smol_download(Hub(), tmp_path).run()
    assert "partial file is kept" in failure.value.user_message()
    assert (tmp_path / (SMOL + ".part")).stat().st_size == 10_000_000

    assert smol_download(Hub(), tmp_path).run() is Outcome.DONE
    assert fake_hub.body_requests(SMOL)[1].start == 10_000_000
    assert fake_hub.bytes_served(SMOL) == SMOL_SIZE
    assert sha256(tmp_path / SMOL) == models.SMOLLM2_SHA256


def test_corrupt_bytes_fail_verification_and_leave_nothing(fake_hub, tmp_path):
    fake_hub.corrupt[SMOL] = 50_000_000
    with pytest.raises(HashMismatchError, match="damaged") as failure:
        smol_download(Hub(), tmp_path).run()
    assert "deleted" in failure.value.user_message()
    assert list(tmp_path.iterdir()) == []


def test_cancel_deletes_the_partial_file(fake_hub, tmp_path):
    download = smol_download(Hub(), tmp_path)
    assert download.run(lambda progress: download.cancel()) is Outcome.CANCELLED
    assert list(tmp_path.iterdir()) == []


def test_not_enough_disk_space_stops_before_any_transfer(fake_hub, tmp_path, monkeypatch):
    monkeypatch.setattr(engine.models.download.shutil, "disk_usage", lambda path: type("U", (), {"free": 50_000_000})())
    with pytest.raises(NotEnoughDiskError, match="only 50.0 MB is free"):
        smol_download(Hub(), tmp_path).run()
    assert fake_hub.bytes_served(SMOL) == 0
    assert list(tmp_path.iterdir()) == []


def test_split_model_downloads_every_part(fake_hub, tmp_path):
    hub = Hub()
    files = hub.repo_files(SMOL_SPLIT_REPO)
    [group] = files.groups
    assert Download(DownloadRecord(files.repo_id, files.revision, group.files), tmp_path, hub).run() is Outcome.DONE
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "SmolLM2-135M-Q4_1-00001-of-00002.gguf",
        "SmolLM2-135M-Q4_1-00002-of-00002.gguf",
    ]
    assert sum(p.stat().st_size for p in tmp_path.iterdir()) == SMOL_SIZE


def test_header_only_check_accepts_qwen_draft_and_rejects_smollm2(fake_hub, qwen_paths):
    hub = Hub()
    target = VocabInfo.from_header(read_header(qwen_paths[0]))
    draft_file = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"

    assert hub.check_draft(target, QWEN_DRAFT_REPO, draft_file) is None
    served = fake_hub.bytes_served(draft_file)
    assert 5_947_750 <= served <= 16 << 20  # the header (5.9 MB), not the 491 MB file

    reason = hub.check_draft(target, SMOL_REPO, SMOL)
    assert reason.startswith("the vocabulary sizes differ")  # neither adds a BOS, so its id is not compared
    assert fake_hub.bytes_served(SMOL) <= 4 << 20


def test_suggest_drafts_for_qwen_target(fake_hub, tmp_path, qwen_paths):
    library = ModelLibrary(tmp_path, tmp_path / "library.json", scan_external=False)
    target = library.add_file(qwen_paths[0])
    suggestions = Hub().suggest_drafts(target)
    assert [s.repo.repo_id for s in suggestions] == [QWEN_DRAFT_REPO]
    assert suggestions[0].n_params == 500_000_000


def test_unknown_repository_is_a_clear_error(fake_hub):
    with pytest.raises(HubError, match="does not exist"):
        Hub().repo_files("nobody/nothing-GGUF")


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"  # nothing listens there any more: connections are refused


def test_unreachable_hub_says_so(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_ENDPOINT", closed_port_url())
    hub = Hub()
    for call in (lambda: hub.search("qwen"), lambda: hub.repo_files(SMOL_REPO)):
        with pytest.raises(HubUnreachableError, match="model hub could not be reached") as failure:
            call()
        assert "internet connection" in failure.value.user_message()
    record = DownloadRecord(SMOL_REPO, "main", (HubFile(SMOL, SMOL_SIZE, models.SMOLLM2_SHA256),))
    with pytest.raises(HubUnreachableError):
        Download(record, tmp_path, hub).run()


def test_repo_details_reads_one_header_for_the_whole_repository(fake_hub):
    details = Hub().repo_details(QWEN_TARGET_REPO)
    # The header gives the KV cache cost for the fit estimate of every quantization.
    assert details.header.kv_bytes_per_token() == 28_672
    assert details.header.architecture == "qwen2"
    assert fake_hub.bytes_served("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf") <= 16 << 20


def test_a_different_file_with_the_same_name_is_not_overwritten(fake_hub, tmp_path):
    (tmp_path / SMOL).write_bytes(b"my own notes")
    with pytest.raises(DownloadError, match="different file named"):
        smol_download(Hub(), tmp_path).run()
    assert (tmp_path / SMOL).read_bytes() == b"my own notes"
    assert [p.name for p in tmp_path.iterdir()] == [SMOL]  # no record, no part file
    assert fake_hub.bytes_served(SMOL) == 0
