"""Tandem's PySide6 desktop app. Talks to the engine only through a worker thread."""
