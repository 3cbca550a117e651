"""A real X server for tests: Xvfb on a free display, and the app's window on it, found with xdotool.

The app runs on Qt's xcb platform (not offscreen), so these tests load the same plugin and system
libraries a Linux desktop does. .ci/run installs Xvfb and xdotool (packaging/system-deps.sh --ci).
"""

from __future__ import annotations

import ctypes
import os
import select
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

# Hang guards, not speed limits: a cold start on two busy cores takes a few seconds.
MAP_TIMEOUT_S = 90.0
EXIT_TIMEOUT_S = 30.0


def require_x_tools() -> None:
    """Skip when Xvfb or xdotool is missing, except in CI (CI=true), where that is a failure."""
    missing = [tool for tool in ("Xvfb", "xdotool") if shutil.which(tool) is None]
    if not missing:
        return
    reason = f"{' and '.join(missing)} not installed (Debian/Ubuntu: bash packaging/system-deps.sh --ci)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must open a real window, but {reason}", pytrace=False)
    pytest.skip(reason)


@contextmanager
def xvfb() -> Iterator[str]:
    """An Xvfb server on a display it picks itself (-displayfd: no race for a free number); yields ':N'."""
    read_end, write_end = os.pipe()
    server = subprocess.Popen(
        ["Xvfb", "-displayfd", str(write_end), "-screen", "0", "1280x800x24", "-nolisten", "tcp"],
        pass_fds=[write_end],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(write_end)
    try:
        # Xvfb writes the display number once it accepts clients; EOF means it died.
        ready, _, _ = select.select([read_end], [], [], 30)
        number = os.read(read_end, 16).decode().strip() if ready else ""
        assert number.isdigit(), f"Xvfb did not start (exit code {server.poll()})"
        yield f":{number}"
    finally:
        os.close(read_end)
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def visible_windows(display: str, name: str) -> list[str]:
    """Ids of the mapped (viewable) windows whose title contains name."""
    found = subprocess.run(
        ["xdotool", "search", "--onlyvisible", "--name", name],
        env={**os.environ, "DISPLAY": display},
        capture_output=True,
        text=True,
        timeout=30,
    )
    return found.stdout.split()


def window_title(display: str, window: str) -> str:
    env = {**os.environ, "DISPLAY": display}
    return subprocess.run(["xdotool", "getwindowname", window], env=env, capture_output=True, text=True).stdout.strip()


class _ClientMessage(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int),
        ("serial", ctypes.c_ulong),
        ("send_event", ctypes.c_int),
        ("display", ctypes.c_void_p),
        ("window", ctypes.c_ulong),
        ("message_type", ctypes.c_ulong),
        ("format", ctypes.c_int),
        ("data", ctypes.c_long * 5),
    ]


class _XEvent(ctypes.Union):
    _fields_ = [("xclient", _ClientMessage), ("pad", ctypes.c_long * 24)]


def close_like_a_window_manager(display: str, window: str) -> None:
    """Send WM_DELETE_WINDOW, as a window manager's close button does (Xvfb runs without one)."""
    x11 = ctypes.CDLL("libX11.so.6")
    x11.XOpenDisplay.restype = ctypes.c_void_p
    x11.XOpenDisplay.argtypes = [ctypes.c_char_p]
    x11.XInternAtom.restype = ctypes.c_ulong
    x11.XInternAtom.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
    x11.XSendEvent.argtypes = [ctypes.c_void_p, ctypes.c_ulong, ctypes.c_int, ctypes.c_long, ctypes.POINTER(_XEvent)]
    x11.XFlush.argtypes = x11.XCloseDisplay.argtypes = [ctypes.c_void_p]
    connection = x11.XOpenDisplay(display.encode())
    assert connection, f"cannot connect to X display {display}"
    event = _XEvent()
    event.xclient.type = 33  # ClientMessage
    event.xclient.window = int(window)
    event.xclient.message_type = x11.XInternAtom(connection, b"WM_PROTOCOLS", 0)
    event.xclient.format = 32
    event.xclient.data[0] = x11.XInternAtom(connection, b"WM_DELETE_WINDOW", 0)
    assert x11.XSendEvent(connection, int(window), 0, 0, ctypes.byref(event))
    x11.XFlush(connection)
    x11.XCloseDisplay(connection)


@dataclass
class WindowRun:
    title: str  # the mapped window's title
    returncode: int  # after the close
    output: str  # the app's stdout and stderr


def open_and_close(
    command: list[str], home: Path, display: str, cwd: Path, env: dict | None = None, while_open=None
) -> WindowRun:
    """Start the app on display with the xcb platform and a fresh data folder, wait until its window
    is mapped, close it as a window manager would, and wait for the process to end.

    home becomes HOME (no models from the Hugging Face cache or LM Studio) and home/specula the
    data folder, so the app opens on its welcome panel and loads nothing. while_open(env), when
    given, runs once the window is mapped, with the app's environment.
    """
    env = {k: v for k, v in (env or os.environ).items() if k not in ("WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    env.update(DISPLAY=display, QT_QPA_PLATFORM="xcb", HOME=str(home), SPECULA_HOME=str(home / "specula"))
    log = home / "app-output.txt"
    with open(log, "w+b") as output:
        app = subprocess.Popen(command, cwd=cwd, env=env, stdout=output, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + MAP_TIMEOUT_S
            while not (windows := visible_windows(display, "Specula")):
                assert app.poll() is None, (
                    f"the app exited with {app.returncode} before its window was mapped:\n{log.read_text()[-3000:]}"
                )
                assert time.monotonic() < deadline, (
                    f"no mapped Specula window after {MAP_TIMEOUT_S:.0f} s:\n{log.read_text()[-3000:]}"
                )
                time.sleep(0.2)
            title = window_title(display, windows[0])
            if while_open is not None:
                while_open(env)
            close_like_a_window_manager(display, windows[0])
            try:
                returncode = app.wait(EXIT_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                pytest.fail(f"the app did not exit within {EXIT_TIMEOUT_S:.0f} s of closing its window", pytrace=False)
        finally:
            if app.poll() is None:
                app.kill()
                app.wait()
    return WindowRun(title, returncode, log.read_text(errors="replace"))
