"""Before Qt starts on X11, `tandem` checks the libraries Qt's xcb plugin needs: a missing one is
one message naming it and the install command, not a Qt abort (reported at the next start as a
native crash). The check is given a stand-in loader here; nothing is uninstalled."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.core.display_libs import XCB_LIBS, install_hint, missing_xcb_libs

from ..support.system_libs import need_xcb_libs

ROOT = Path(__file__).resolve().parents[2]
X11 = {"DISPLAY": ":0"}


def without(*names):
    return lambda soname: soname not in names


@pytest.mark.parametrize("env, platform, expected", [
    (X11, "linux", ["libxcb-cursor.so.0"]),
    ({"DISPLAY": ":0", "QT_QPA_PLATFORM": "xcb"}, "linux", ["libxcb-cursor.so.0"]),
    ({"QT_QPA_PLATFORM": "xcb:foo=1"}, "linux", ["libxcb-cursor.so.0"]),
    ({"DISPLAY": ":0", "QT_QPA_PLATFORM": "offscreen"}, "linux", []),  # another platform asked for
    ({"DISPLAY": ":0", "WAYLAND_DISPLAY": "wayland-0"}, "linux", []),  # Qt tries Wayland first
    ({"QT_QPA_PLATFORM": "wayland;xcb"}, "linux", []),
    (X11, "darwin", []),
], ids=["x11", "xcb-asked", "xcb-with-options", "offscreen", "wayland-session", "wayland-first", "macos"])
def test_the_libraries_are_checked_only_where_qt_will_use_xcb(env, platform, expected):
    assert missing_xcb_libs(env, platform, without("libxcb-cursor.so.0")) == expected


def test_every_missing_library_is_named_with_one_install_command():
    missing = missing_xcb_libs(X11, "linux", without("libxcb-cursor.so.0", "libxkbcommon-x11.so.0"))
    assert missing == ["libxcb-cursor.so.0", "libxkbcommon-x11.so.0"]
    hint = install_hint(missing)
    assert "libxcb-cursor.so.0, libxkbcommon-x11.so.0" in hint
    assert hint.endswith("\n    sudo apt-get install -y libxcb-cursor0 libxkbcommon-x11-0\n")
    assert missing_xcb_libs(X11, "linux", lambda soname: True) == []


def test_this_machine_has_them_all():
    """The real loader finds every one here, where they are installed (CI installs them and
    fails this test if they are not; a fresh headless machine skips it, naming the packages)."""
    need_xcb_libs()
    assert missing_xcb_libs(X11, "linux") == []


def test_the_readme_install_line_lists_the_same_packages():
    line = next(x for x in (ROOT / "README.md").read_text("utf-8").splitlines()
                if x.strip().startswith("sudo apt-get install -y libxcb"))
    assert line.split()[4:] == list(XCB_LIBS.values())


def test_tandem_says_which_library_is_missing_instead_of_letting_qt_abort(tmp_path):
    """`tandem` with no command (the window), on an X display, where libxcb-cursor cannot be
    loaded: the dynamic loader is made to refuse it, the rest of the start is the real one
    (so the other libraries must be there: on a machine without them tandem names them all)."""
    need_xcb_libs()
    code = ("import ctypes, sys\n"
            "real = ctypes.CDLL\n"
            "def refuse_cursor(name, *a, **k):\n"
            "    if 'libxcb-cursor' in str(name):\n"
            "        raise OSError(f'{name}: cannot open shared object file')\n"
            "    return real(name, *a, **k)\n"
            "ctypes.CDLL = refuse_cursor\n"
            "from app.main import main\n"
            "sys.exit(main([]))\n")
    env = {k: v for k, v in os.environ.items() if k not in ("QT_QPA_PLATFORM", "WAYLAND_DISPLAY")}
    env.update(DISPLAY=":987", TANDEM_LOG_DIR=str(tmp_path))  # no X server there: Qt would abort
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert "missing: libxcb-cursor.so.0." in r.stderr
    assert r.stderr.endswith("\n    sudo apt-get install -y libxcb-cursor0\n")
    assert "Traceback" not in r.stderr and "qt.qpa" not in r.stderr
    assert not (tmp_path / "native-crash.log").exists()  # nothing for the next start to call a crash
