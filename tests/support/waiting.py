"""Waiting on a condition with a deadline, outside Qt's event loop (inside it: qtbot.waitUntil)."""

from __future__ import annotations

import time


def wait_until(condition, timeout: float = 30, what: str = "the condition", interval: float = 0.02):
    """Poll `condition()` until it is true and return its value; past `timeout` seconds, fail naming `what`."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"waited {timeout} s for {what}"
        time.sleep(interval)
    return value
