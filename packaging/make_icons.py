"""Render assets/icon.svg into the raster icons the platforms want; run after editing the SVG.

    .venv/bin/python packaging/make_icons.py

Writes assets/icon.png (256 px: the window icon and the Linux menu icon), assets/icon.ico
(Windows, 16–256 px) and assets/icon.icns (macOS, 16–1024 px). ICO and ICNS both accept PNG
images inside, so they are packed here by hand rather than with another dependency.
"""

import os
import struct
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QBuffer, QByteArray, QIODevice, Qt  # noqa: E402
from PySide6.QtGui import QGuiApplication, QImage, QPainter  # noqa: E402
from PySide6.QtSvg import QSvgRenderer  # noqa: E402

ASSETS = Path(__file__).resolve().parent.parent / "assets"
ICO_SIZES = (16, 24, 32, 48, 64, 128, 256)
# ICNS entry types holding PNG data, by pixel size (Apple's "icp4".."ic10").
ICNS_TYPES = {16: b"icp4", 32: b"icp5", 64: b"icp6", 128: b"ic07", 256: b"ic08", 512: b"ic09", 1024: b"ic10"}


def render_png(renderer: QSvgRenderer, size: int) -> bytes:
    image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    renderer.render(painter)
    painter.end()
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buffer, "PNG")
    return bytes(data)


def ico(pngs: dict[int, bytes]) -> bytes:
    """ICONDIR, one 16-byte entry per image (0 means 256 px), then the PNG data."""
    header = struct.pack("<HHH", 0, 1, len(pngs))
    offset = len(header) + 16 * len(pngs)
    entries, blobs = b"", b""
    for size, png in pngs.items():
        entries += struct.pack("<BBBBHHII", size % 256, size % 256, 0, 0, 1, 32, len(png), offset)
        blobs += png
        offset += len(png)
    return header + entries + blobs


def icns(pngs: dict[int, bytes]) -> bytes:
    """'icns' + total length, then (type, length including its 8-byte header, PNG) per image."""
    body = b"".join(ICNS_TYPES[size] + struct.pack(">I", 8 + len(png)) + png for size, png in pngs.items())
    return b"icns" + struct.pack(">I", 8 + len(body)) + body


def main() -> int:
    _app = QGuiApplication(sys.argv[:1])  # QSvgRenderer wants a GUI application
    renderer = QSvgRenderer(str(ASSETS / "icon.svg"))
    if not renderer.isValid():
        print("assets/icon.svg did not parse", file=sys.stderr)
        return 1
    pngs = {size: render_png(renderer, size) for size in sorted({*ICO_SIZES, *ICNS_TYPES})}
    outputs = {
        "icon.png": pngs[256],
        "icon.ico": ico({s: pngs[s] for s in ICO_SIZES}),
        "icon.icns": icns({s: pngs[s] for s in ICNS_TYPES}),
    }
    for name, data in outputs.items():
        (ASSETS / name).write_bytes(data)
        print(f"assets/{name}: {len(data) / 1024:.0f} KB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
