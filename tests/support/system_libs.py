"""Tests that need the window's system libraries (Qt's xcb libraries, Xvfb) skip where they are
missing, as on a fresh headless machine running the README's test command, with one line
naming the packages to install. CI installs them and sets TANDEM_REQUIRE_SYSTEM_LIBS=1
(.ci/run): there a missing one fails the test instead, so a test CI means to run is never
skipped there without anyone seeing it."""

from __future__ import annotations

import os
import shutil
import sys

import pytest

from app.core.display_libs import XCB_LIBS, loads

REQUIRED_ENV = "TANDEM_REQUIRE_SYSTEM_LIBS"


def _not_here(what: str) -> None:
    message = f"needs {what}"
    if os.environ.get(REQUIRED_ENV) == "1":
        pytest.fail(f"{message} ({REQUIRED_ENV}=1: CI installs them, so this test must run)")
    pytest.skip(message)


def missing_xcb_packages() -> list[str]:
    """The Debian packages of the xcb libraries the real loader cannot load here."""
    return [package for soname, package in XCB_LIBS.items() if not loads(soname)]


def need_xcb_libs() -> None:
    """Skip (or fail under CI) unless every library Qt's xcb plugin needs loads here."""
    if not sys.platform.startswith("linux"):
        pytest.skip("Linux only")
    missing = missing_xcb_packages()
    if missing:
        _not_here(f"Qt's xcb libraries: sudo apt-get install -y {' '.join(missing)}")


def need_xvfb() -> None:
    """Skip (or fail under CI) unless Linux with xvfb-run and Qt's xcb libraries."""
    need_xcb_libs()
    if shutil.which("xvfb-run") is None:
        _not_here("xvfb-run: sudo apt-get install -y xvfb")
