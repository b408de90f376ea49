"""The light and dark looks: Fusion with a palette and Tandem's style sheet."""

from __future__ import annotations

from importlib import resources


def apply_theme(app, theme: str = "system", scheme=None) -> None:
    """Fusion style with a light or dark palette; 'system' follows the desktop's scheme (`scheme`:
    the one colorSchemeChanged just reported, else the one Qt knows now)."""
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QColor, QPalette

    app.setStyle("Fusion")
    dark = theme == "dark"
    if theme == "system":
        try:
            dark = (scheme if scheme is not None else app.styleHints().colorScheme()) == Qt.ColorScheme.Dark
        except AttributeError:  # Qt < 6.5
            dark = False
    pal = QPalette()
    if dark:
        for role, color in ((QPalette.Window, "#202124"), (QPalette.WindowText, "#e8eaed"),
                            (QPalette.Base, "#18191b"), (QPalette.AlternateBase, "#26272a"),
                            (QPalette.Text, "#e8eaed"), (QPalette.Button, "#2b2c2f"),
                            (QPalette.ButtonText, "#e8eaed"), (QPalette.Highlight, "#3d7be0"),
                            (QPalette.HighlightedText, "#ffffff"), (QPalette.ToolTipBase, "#2b2c2f"),
                            (QPalette.ToolTipText, "#e8eaed"), (QPalette.Link, "#8ab4f8"),
                            (QPalette.PlaceholderText, "#8e9297"),
                            # Fusion draws frames and check box outlines from these
                            (QPalette.Light, "#5f6368"), (QPalette.Midlight, "#4a4d51"),
                            (QPalette.Mid, "#3c4043"), (QPalette.Dark, "#17181a"), (QPalette.Shadow, "#000000")):
            pal.setColor(role, QColor(color))
        # disabled controls must look disabled (the palette above sets every group alike)
        for role, color in ((QPalette.WindowText, "#6f7378"), (QPalette.Text, "#6f7378"),
                            (QPalette.ButtonText, "#6f7378"), (QPalette.Button, "#242528"),
                            (QPalette.Base, "#1d1e20"), (QPalette.PlaceholderText, "#5f6368")):
            pal.setColor(QPalette.Disabled, role, QColor(color))
    app.setPalette(pal)
    styles = resources.files("resources").joinpath("styles")
    qss = styles.joinpath("tandem.qss").read_text("utf-8")
    if dark:
        qss += styles.joinpath("tandem-dark.qss").read_text("utf-8")
    app.setStyleSheet(qss.replace("@BUBBLE_USER@", "#2d3a4f" if dark else "#e8f0fe")
                         .replace("@BUBBLE_MODEL@", "#26272a" if dark else "#ffffff"))
