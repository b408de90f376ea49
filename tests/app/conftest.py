"""The window most app tests drive: the synthetic Gemma 4 pair loaded, closed after the test."""

from __future__ import annotations

import pytest

from ..support.window import make_window


@pytest.fixture
def win(qtbot, tmp_path, tiny):
    w = make_window(qtbot, tmp_path, tiny["target"], tiny[0.7])
    yield w
    if w.isVisible():
        w.close()
