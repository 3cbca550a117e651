"""packaging/linux/install-desktop.sh, run for real against a throwaway HOME and a stand-in bundle.

The script needs only an executable and the bundle's assets folder beside it, so a small folder
laid out like the bundle stands in for a built one (test_bundle.py covers the real build).
"""

import os
import shutil
import subprocess
import sys

import pytest

from tests.models import REPO

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux desktop integration")
SCRIPT = REPO / "packaging" / "linux" / "install-desktop.sh"


@pytest.fixture
def bundle(tmp_path):
    """dist/specula's layout in a path with a space and an ampersand, which Exec= must survive."""
    folder = tmp_path / "My Apps & Tools" / "specula"
    shutil.copytree(REPO / "assets", folder / "_internal" / "assets")
    exe = folder / "specula"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    return exe


def run(home, *args):
    env = {**os.environ, "HOME": str(home)}
    env.pop("XDG_DATA_HOME", None)
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True)


def test_install_then_uninstall(tmp_path, bundle):
    home = tmp_path / "home"
    result = run(home, str(bundle))
    assert result.returncode == 0, result.stderr

    share = home / ".local" / "share"
    entry = share / "applications" / "specula.desktop"
    lines = entry.read_text().splitlines()
    assert f'Exec="{bundle}"' in lines
    assert f"TryExec={bundle}" in lines
    assert "Icon=specula" in lines
    assert (share / "icons/hicolor/256x256/apps/specula.png").read_bytes() == (REPO / "assets/icon.png").read_bytes()
    assert (share / "icons/hicolor/scalable/apps/specula.svg").is_file()
    if shutil.which("desktop-file-validate"):
        check = subprocess.run(["desktop-file-validate", str(entry)], capture_output=True, text=True)
        assert check.returncode == 0 and not check.stdout.strip(), check.stdout

    result = run(home, "--uninstall")
    assert result.returncode == 0, result.stderr
    assert not entry.exists()
    assert not (share / "icons/hicolor/256x256/apps/specula.png").exists()
    assert not (share / "icons/hicolor/scalable/apps/specula.svg").exists()


def test_refuses_a_missing_bundle(tmp_path):
    result = run(tmp_path / "home", str(tmp_path / "nowhere" / "specula"))
    assert result.returncode == 1
    assert "build the bundle first" in result.stderr
    assert not (tmp_path / "home" / ".local" / "share" / "applications" / "specula.desktop").exists()
