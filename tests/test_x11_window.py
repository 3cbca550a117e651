"""The app from source opens a real X11 window (Qt's xcb platform on Xvfb, not offscreen) and
closes cleanly when the window manager asks it to."""

import json
import subprocess
import sys

import pytest

from tests.models import REPO
from tests.x11 import open_and_close, require_x_tools, visible_windows, xvfb

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="X11 desktops are Linux here")


def welcome_panel_home(home):
    """On a truly empty data folder the app would start assembling the starter pair (1.6 GB) when the
    `starter` extra is installed. A settings file naming a model that is not there keeps it on the
    welcome panel with nothing to load."""
    (home / "specula").mkdir()
    settings = {"target": {"path": str(home / "not-downloaded-yet.gguf")}}
    (home / "specula" / "settings.json").write_text(json.dumps(settings))


def test_the_app_opens_a_window_on_x11_and_closes_cleanly(tmp_path):
    require_x_tools()
    welcome_panel_home(tmp_path)
    with xvfb() as display:
        run = open_and_close([sys.executable, "-m", "app"], tmp_path, display, cwd=REPO)
    assert "Specula" in run.title
    assert run.returncode == 0, run.output[-3000:]
    assert "Traceback" not in run.output, run.output[-3000:]


def test_a_second_start_on_the_same_data_folder_brings_the_first_forward_and_ends(tmp_path):
    """Two apps on one data folder would both write its history index, downloads and settings."""
    require_x_tools()
    welcome_panel_home(tmp_path)
    second = {}

    def start_again(env):
        second["run"] = subprocess.run(
            [sys.executable, "-m", "app"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
        )
        second["windows"] = visible_windows(env["DISPLAY"], "Specula")

    with xvfb() as display:
        run = open_and_close([sys.executable, "-m", "app"], tmp_path, display, cwd=REPO, while_open=start_again)
    assert second["run"].returncode == 0, second["run"].stderr[-3000:]
    assert "already running" in second["run"].stderr and "brought forward" in second["run"].stderr
    assert len(second["windows"]) == 1  # the first app's, still open; the second made none
    assert run.returncode == 0 and "Traceback" not in run.output, run.output[-3000:]
