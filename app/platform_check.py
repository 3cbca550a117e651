"""Before Qt starts on Linux: can its window-system plugin load here? If not, say what to install.

When the xcb (X11) or wayland platform plugin cannot load a system library, Qt prints a long
message and aborts the process, so the app never gets a say. This check runs first: it reads the
libraries each candidate plugin needs from its ELF header (and those of the Qt libraries it pulls
in), asks the dynamic loader for each one, and names the packages that provide the missing ones.
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys
from pathlib import Path

# The libraries the xcb and wayland plugins need that a desktop may lack (read with readelf -d from
# PySide6 6.11's libqxcb.so, libQt6XcbQpa.so.6, libqwayland.so, libQt6WaylandClient.so.6), and the
# packages that provide them: (Debian/Ubuntu, Fedora). packaging/system-deps.sh installs the
# Debian ones; packaging/specula.spec ships the BUNDLED ones inside the double-click app.
PACKAGES: dict[str, tuple[str, str]] = {
    "libxcb-cursor.so.0": ("libxcb-cursor0", "xcb-util-cursor"),
    "libxcb-icccm.so.4": ("libxcb-icccm4", "xcb-util-wm"),
    "libxcb-keysyms.so.1": ("libxcb-keysyms1", "xcb-util-keysyms"),
    "libxcb-image.so.0": ("libxcb-image0", "xcb-util-image"),
    "libxcb-render-util.so.0": ("libxcb-render-util0", "xcb-util-renderutil"),
    "libxcb-util.so.1": ("libxcb-util1", "xcb-util"),
    "libxkbcommon-x11.so.0": ("libxkbcommon-x11-0", "libxkbcommon-x11"),
    "libwayland-cursor.so.0": ("libwayland-cursor0", "libwayland-cursor"),
    "libwayland-egl.so.1": ("libwayland-egl1", "libwayland-egl"),
    "libxkbcommon.so.0": ("libxkbcommon0", "libxkbcommon"),
    "libxcb-randr.so.0": ("libxcb-randr0", "libxcb"),
    "libxcb-shape.so.0": ("libxcb-shape0", "libxcb"),
    "libxcb-xkb.so.1": ("libxcb-xkb1", "libxcb"),
    "libxcb-sync.so.1": ("libxcb-sync1", "libxcb"),
    "libxcb-xfixes.so.0": ("libxcb-xfixes0", "libxcb"),
    "libxcb-shm.so.0": ("libxcb-shm0", "libxcb"),
    "libxcb-render.so.0": ("libxcb-render0", "libxcb"),
    "libxcb-glx.so.0": ("libxcb-glx0", "libxcb"),
    "libX11-xcb.so.1": ("libx11-xcb1", "libX11-xcb"),
    "libwayland-client.so.0": ("libwayland-client0", "libwayland-client"),
    "libGL.so.1": ("libgl1", "libglvnd-glx"),
    "libEGL.so.1": ("libegl1", "libglvnd-egl"),
    "libfontconfig.so.1": ("libfontconfig1", "fontconfig"),
    "libdbus-1.so.3": ("libdbus-1-3", "dbus-libs"),
}
# Small utility libraries with a stable ABI that stock desktops often lack: the double-click
# bundle carries its own copies. Everything else (libc, libGL, libX11, libxcb and its extensions,
# the wayland libraries every Wayland desktop's GTK needs) must be the system's own, matching its
# X server, compositor and drivers.
BUNDLED = (
    "libxcb-cursor.so.0",
    "libxcb-icccm.so.4",
    "libxcb-keysyms.so.1",
    "libxcb-image.so.0",
    "libxcb-render-util.so.0",
    "libxcb-util.so.1",
    "libxkbcommon-x11.so.0",
)

# Platform name -> plugin file in Qt's plugins/platforms folder.
PLUGINS = {"xcb": "libqxcb.so", "wayland": "libqwayland.so"}


def candidate_platforms(env: os._Environ | dict) -> list[str]:
    """The platform plugins Qt will try, in order, as QGuiApplication chooses them on Linux."""
    requested = env.get("QT_QPA_PLATFORM", "")
    if requested:
        return [name.split(":")[0] for name in requested.split(";") if name]
    if env.get("XDG_SESSION_TYPE") == "wayland":
        return ["wayland", "xcb"]
    return ["xcb"]


def needed(path: Path) -> list[str]:
    """The DT_NEEDED entries of a 64-bit ELF shared library ([] when it cannot be read as one)."""
    try:
        data = path.read_bytes()
    except OSError:
        return []
    if data[:4] != b"\x7fELF" or data[4] != 2:  # ELFCLASS64 only (every PySide6 Linux wheel)
        return []
    order = "<" if data[5] == 1 else ">"
    (shoff,) = struct.unpack_from(order + "Q", data, 0x28)
    shentsize, shnum = struct.unpack_from(order + "HH", data, 0x3A)
    sections = [struct.unpack_from(order + "IIQQQQII", data, shoff + i * shentsize) for i in range(shnum)]
    names = []
    for _name, kind, _flags, _addr, offset, size, link, _info in sections:
        if kind != 6:  # SHT_DYNAMIC; its sh_link is the string table
            continue
        strings = sections[link][4]
        for tag, value in struct.iter_unpack(order + "qQ", data[offset : offset + size]):
            if tag == 0:  # DT_NULL
                break
            if tag == 1:  # DT_NEEDED
                start = strings + value
                names.append(data[start : data.index(b"\0", start)].decode())
    return names


def missing_libraries(plugin: Path, qt_lib_dir: Path) -> list[str]:
    """System libraries the plugin needs, directly or through Qt's own libraries, that do not load."""
    missing, seen, todo = [], set(), [plugin]
    while todo:
        for soname in needed(todo.pop()):
            if soname in seen:
                continue
            seen.add(soname)
            if (qt_lib_dir / soname).is_file():  # Qt's (or ICU's) own: follow its needs too
                todo.append(qt_lib_dir / soname)
                continue
            try:
                ctypes.CDLL(soname)
            except OSError:
                missing.append(soname)
    return missing


def problem(env: os._Environ | dict, plugins_dir: Path, qt_lib_dir: Path) -> str | None:
    """What to tell the user when no candidate platform plugin can load here; None when one can."""
    missing: dict[str, list[str]] = {}
    for platform in candidate_platforms(env):
        plugin = plugins_dir / "platforms" / PLUGINS.get(platform, "")
        if platform not in PLUGINS or not plugin.is_file():
            return None  # a plugin this check does not know, or not shipped: Qt decides
        libs = missing_libraries(plugin, qt_lib_dir)
        if not libs:
            return None
        missing[platform] = libs
    if not missing:
        return None
    return message(missing)


def message(missing: dict[str, list[str]]) -> str:
    sonames = sorted({soname for libs in missing.values() for soname in libs})
    debian = sorted({PACKAGES[s][0] for s in sonames if s in PACKAGES})
    fedora = sorted({PACKAGES[s][1] for s in sonames if s in PACKAGES})
    unknown = [s for s in sonames if s not in PACKAGES]
    plugins = "platform plugins need" if len(missing) > 1 else "platform plugin needs"
    lines = [
        f"Specula cannot open its window: Qt's {' and '.join(missing)} {plugins} system libraries "
        f"this machine lacks: {', '.join(sonames)}.",
        "Install them, then start Specula again:",
    ]
    if debian:
        lines.append(f"  Debian/Ubuntu:  sudo apt install {' '.join(debian)}")
        lines.append(f"  Fedora:         sudo dnf install {' '.join(fedora)}")
    if unknown:
        lines.append(f"  and the package that provides {', '.join(unknown)} on your system")
    return "\n".join(lines)


def check() -> str | None:
    """The message to print instead of starting Qt, or None (not Linux, or the plugin can load)."""
    if not sys.platform.startswith("linux"):
        return None
    from PySide6.QtCore import QLibraryInfo

    plugins_dir = Path(QLibraryInfo.path(QLibraryInfo.LibraryPath.PluginsPath))
    qt_lib_dir = Path(QLibraryInfo.path(QLibraryInfo.LibraryPath.LibrariesPath))
    return problem(os.environ, plugins_dir, qt_lib_dir)
