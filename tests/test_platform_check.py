"""app.platform_check: before Qt starts, a missing system library of the xcb plugin becomes a short
message with the packages to install, instead of Qt's abort.

A library is made missing for real by putting an empty file of its name first on LD_LIBRARY_PATH:
the dynamic loader then fails on it exactly as Qt's plugin loader would.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from app import platform_check
from tests.models import REPO

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Qt's xcb and wayland plugins are Linux's")
HIDDEN = ["libxcb-icccm.so.4", "libxcb-keysyms.so.1"]


def qt_dirs() -> tuple[Path, Path]:
    from PySide6.QtCore import QLibraryInfo

    return (
        Path(QLibraryInfo.path(QLibraryInfo.LibraryPath.PluginsPath)),
        Path(QLibraryInfo.path(QLibraryInfo.LibraryPath.LibrariesPath)),
    )


@pytest.fixture
def broken_libs(tmp_path) -> dict:
    """An environment in which HIDDEN cannot be loaded, and Qt must use xcb on some display."""
    for soname in HIDDEN:
        (tmp_path / soname).write_bytes(b"")
    env = {k: v for k, v in os.environ.items() if k != "WAYLAND_DISPLAY"}
    return {**env, "LD_LIBRARY_PATH": str(tmp_path), "QT_QPA_PLATFORM": "xcb", "DISPLAY": ":99"}


def test_the_xcb_plugins_libraries_are_read_from_its_elf_header():
    plugins, libs = qt_dirs()
    needed = platform_check.needed(plugins / "platforms" / "libqxcb.so")
    assert "libxcb-cursor.so.0" in needed and "libxcb.so.1" in needed
    assert not platform_check.needed(REPO / "README.md")  # not ELF: nothing, no exception


def test_on_this_machine_the_xcb_plugin_can_load():
    # packaging/system-deps.sh installs every package the plugin needs (.ci/run runs it first).
    plugins, libs = qt_dirs()
    assert platform_check.missing_libraries(plugins / "platforms" / "libqxcb.so", libs) == []
    assert platform_check.problem({"QT_QPA_PLATFORM": "xcb"}, plugins, libs) is None


def test_the_app_names_the_packages_instead_of_letting_qt_abort(broken_libs):
    app = subprocess.run(
        [sys.executable, "-m", "app"], cwd=REPO, env=broken_libs, capture_output=True, text=True, timeout=120
    )
    assert app.returncode == 1, app.stderr
    assert "Specula cannot open its window" in app.stderr
    assert "libxcb-icccm.so.4, libxcb-keysyms.so.1" in app.stderr
    assert "sudo apt install libxcb-icccm4 libxcb-keysyms1" in app.stderr
    assert "sudo dnf install xcb-util-keysyms xcb-util-wm" in app.stderr
    assert "qt.qpa.plugin" not in app.stderr  # it stopped before Qt tried


def test_without_the_check_qt_itself_aborts_in_that_environment(broken_libs):
    # The premise of the check: the same environment really breaks Qt (so the test above can fail).
    qt = subprocess.run(
        [sys.executable, "-c", "from PySide6.QtWidgets import QApplication; QApplication([])"],
        env=broken_libs,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert qt.returncode != 0
    assert 'Could not load the Qt platform plugin "xcb"' in qt.stderr


def test_wayland_sessions_fall_back_to_xcb_as_qt_does():
    assert platform_check.candidate_platforms({"XDG_SESSION_TYPE": "wayland"}) == ["wayland", "xcb"]
    assert platform_check.candidate_platforms({}) == ["xcb"]
    assert platform_check.candidate_platforms({"QT_QPA_PLATFORM": "offscreen"}) == ["offscreen"]
    plugins, libs = qt_dirs()
    assert platform_check.problem({"QT_QPA_PLATFORM": "offscreen"}, plugins, libs) is None


def test_system_deps_installs_every_debian_package_the_check_names():
    script = (REPO / "packaging" / "system-deps.sh").read_text()
    listed = set(re.findall(r"[a-z0-9][a-z0-9.+-]+", script.split("packages=(")[1].split(")")[0]))
    assert {debian for debian, _fedora in platform_check.PACKAGES.values()} <= listed
