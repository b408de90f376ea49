"""Render resources/icons/tandem.svg to the PNG sizes desktops want, a Windows .ico and a
macOS .icns (Qt's image plugins write both). Run after editing the SVG:

    QT_QPA_PLATFORM=offscreen .venv/bin/python packaging/make_icons.py
"""

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication, QImage, QPainter
from PySide6.QtSvg import QSvgRenderer

SIZES = (16, 24, 32, 48, 64, 128, 256, 512)
ICONS = Path(__file__).resolve().parent.parent / "resources" / "icons"


def render(size: int) -> QImage:
    img = QImage(size, size, QImage.Format_ARGB32)
    img.fill(Qt.transparent)
    p = QPainter(img)
    QSvgRenderer(str(ICONS / "tandem.svg")).render(p)
    p.end()
    return img


def main():
    app = QGuiApplication([])  # noqa: F841 - image plugins need an application
    for s in SIZES:
        render(s).save(str(ICONS / f"tandem-{s}.png"))
    render(256).save(str(ICONS / "tandem.ico"))
    render(512).save(str(ICONS / "tandem.icns"))
    print("\n".join(sorted(p.name for p in ICONS.iterdir())))


if __name__ == "__main__":
    main()
