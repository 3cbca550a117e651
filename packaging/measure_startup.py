"""Time from launch to a visible main window, measured from outside the app.

    .venv/bin/python packaging/measure_startup.py                    # the bundle, dist/specula/specula
    .venv/bin/python packaging/measure_startup.py .venv/bin/python -m app   # the source install
    .venv/bin/python packaging/measure_startup.py --models .cache/models      # with models to load

Each run starts the app on its own Xvfb display with a fresh, empty home folder (so the app has
no models and opens on its welcome panel; with --models DIR, DIR's GGUF files are linked into
its models folder and the app starts loading them), and polls the X server until a top-level window
with "Specula" in its title is mapped (viewable). Needs Xvfb and xwininfo (Debian: xvfb, x11-utils) and
Qt's xcb libraries (libxcb-cursor0, libxcb-icccm4, libxcb-keysyms1).
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DISPLAY = ":93"
RUNS = 5
TIMEOUT_S = 60.0
# A top-level window of the app: "Specula" in its title and a WM_CLASS of (anything, "Specula").
WINDOW = re.compile(r'^\s*(0x[0-9a-f]+) "[^"]*Specula[^"]*": \("[^"]*" "Specula"\)', re.MULTILINE)


def viewable_window(env: dict) -> bool:
    tree = subprocess.run(["xwininfo", "-root", "-tree"], env=env, capture_output=True, text=True).stdout
    for window_id in WINDOW.findall(tree):
        info = subprocess.run(["xwininfo", "-id", window_id], env=env, capture_output=True, text=True).stdout
        if "Map State: IsViewable" in info:
            return True
    return False


def time_to_window(command: list[str], models: Path | None) -> float:
    with tempfile.TemporaryDirectory(prefix="specula-startup-") as home:
        if models:
            (Path(home) / "specula" / "models").mkdir(parents=True)
            for gguf in models.glob("*.gguf"):
                (Path(home) / "specula" / "models" / gguf.name).symlink_to(gguf.resolve())
        # An empty HOME as well as SPECULA_HOME: no models from the HF cache or LM Studio either.
        env = {**os.environ, "DISPLAY": DISPLAY, "HOME": home, "SPECULA_HOME": f"{home}/specula"}
        env.pop("QT_QPA_PLATFORM", None)
        t0 = time.perf_counter()
        app = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            while time.perf_counter() - t0 < TIMEOUT_S:
                if app.poll() is not None:
                    raise SystemExit(f"the app exited with {app.returncode}: {app.stderr.read().decode()[-2000:]}")
                if viewable_window(env):
                    return time.perf_counter() - t0
                time.sleep(0.01)
            raise SystemExit(f"no window after {TIMEOUT_S:.0f} s")
        finally:
            app.terminate()
            app.wait(10)


def main() -> int:
    args = sys.argv[1:]
    models = Path(args[1]) if args[:1] == ["--models"] else None
    command = args[2:] if models else args
    command = command or [str(ROOT / "dist" / "specula" / "specula")]
    xvfb = subprocess.Popen(["Xvfb", DISPLAY, "-screen", "0", "1280x800x24", "-nolisten", "tcp"])
    try:
        time.sleep(1.0)  # let the X server come up
        times = [time_to_window(command, models) for _ in range(RUNS)]
    finally:
        xvfb.terminate()
        xvfb.wait(10)
    print(f"start to visible window: {' '.join(f'{t:.2f}' for t in times)} s; median {statistics.median(times):.2f} s")
    print(f"command: {' '.join(command)}; models: {models or 'none (welcome panel)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
