import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402

from engine.config import ModelSpec  # noqa: E402
from tests import models  # noqa: E402


@pytest.fixture(scope="session")
def smollm2_path():
    return str(models.smollm2())


@pytest.fixture(scope="session")
def gemma3_path():
    """Gemma 3 270M (base): another family, no chat template in the file, a 262k vocabulary."""
    return str(models.gemma3())


@pytest.fixture(scope="session")
def qwen_paths():
    target, draft = models.qwen_pair()
    return str(target), str(draft)


@pytest.fixture(scope="session")
def small_engine(smollm2_path):
    """SmolLM2 as its own draft: fast, and every greedy draft token should be accepted."""
    from engine.decoding.chat_engine import Engine

    spec = ModelSpec(smollm2_path, n_ctx=2048)
    engine = Engine(spec, spec)
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def qwen_engine(qwen_paths):
    from engine.decoding.chat_engine import Engine

    target, draft = qwen_paths
    engine = Engine(ModelSpec(target, n_ctx=4096), ModelSpec(draft, n_ctx=4096))
    yield engine
    engine.close()


@pytest.fixture
def isolated_home(tmp_path, monkeypatch):
    """A fresh Specula data folder (models, chats, settings) for one test."""
    monkeypatch.setenv("SPECULA_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture(autouse=True)
def no_keyring():
    """No test reaches the user's real keyring: remote engines' keys go to keyring's fail backend
    (the app keeps them for the session, as on a machine without one) unless a test sets another.
    A test about the no-keyring case names it, to say so."""
    import keyring
    import keyring.backends.fail

    before = keyring.get_keyring()
    keyring.set_keyring(keyring.backends.fail.Keyring())
    try:
        yield
    finally:
        keyring.set_keyring(before)


def pytest_sessionstart(session):
    """llama.cpp can kill the whole process on some CPUs (its AMX kernels did: llama.cpp #20824),
    and most tests load models in-process. Decode batches once in a subprocess first, so such a
    machine gets one clear failure, not a test run that dies without a report."""
    import signal
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "tests.batched_decode", str(models.smollm2()), "decided"],
        cwd=models.REPO,
        capture_output=True,
        text=True,
    )
    if proc.returncode < 0:
        last = "\n".join(proc.stderr.strip().splitlines()[-5:])
        pytest.exit(
            f"llama.cpp crashed ({signal.Signals(-proc.returncode).name}) decoding batches with this machine's "
            f"CPU weight placement; model tests would die with it. Last lines:\n{last}",
            returncode=3,
        )
