"""The system libraries Qt's xcb platform plugin (the window on X11) needs, checked before Qt
starts. Without one of them Qt aborts while creating the application, after a message few
users can act on, and the abort used to come back at the next start as "a crash inside the
native engine". Checked first, a missing library is one message naming it and the command
that installs it. No Qt here: this runs before PySide6 is imported."""

from __future__ import annotations

import ctypes
import os
import sys

# the libraries PySide6's libqxcb.so links (ldd) that a desktop without Qt apps may lack, with
# the Debian / Ubuntu package of each (the README's install line lists the same packages)
XCB_LIBS = {
    "libxcb-cursor.so.0": "libxcb-cursor0",
    "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-image.so.0": "libxcb-image0",
    "libxcb-keysyms.so.1": "libxcb-keysyms1",
    "libxcb-randr.so.0": "libxcb-randr0",
    "libxcb-render-util.so.0": "libxcb-render-util0",
    "libxcb-shape.so.0": "libxcb-shape0",
    "libxcb-xkb.so.1": "libxcb-xkb1",
    "libxkbcommon-x11.so.0": "libxkbcommon-x11-0",
}


def loads(soname: str) -> bool:
    """The dynamic loader finds and loads `soname`, as it will when Qt loads its plugin."""
    try:
        ctypes.CDLL(soname)
    except OSError:
        return False
    return True


def uses_xcb(env) -> bool:
    """Qt will open the window through xcb: asked for by name, or an X display with no Wayland
    one (on a Wayland session Qt tries Wayland first, which needs none of these)."""
    platform = env.get("QT_QPA_PLATFORM", "")
    if platform:
        return platform.split(";")[0].split(":")[0] == "xcb"
    return bool(env.get("DISPLAY")) and not env.get("WAYLAND_DISPLAY")


def missing_xcb_libs(env=None, platform: str = sys.platform, loader=loads) -> list[str]:
    """The XCB_LIBS the loader cannot load, where the window will use xcb; else []."""
    env = os.environ if env is None else env
    if not platform.startswith("linux") or not uses_xcb(env):
        return []
    return [lib for lib in XCB_LIBS if not loader(lib)]


def install_hint(missing: list[str]) -> str:
    """What `tandem` prints instead of letting Qt abort: the libraries and the one command."""
    packages = " ".join(XCB_LIBS[lib] for lib in missing)
    return (f"tandem: error: the window needs system libraries that are missing: {', '.join(missing)}. "
            f"On Debian or Ubuntu, install them with:\n    sudo apt-get install -y {packages}\n")
