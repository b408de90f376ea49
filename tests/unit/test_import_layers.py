"""The packages' import graph: app -> engine, never back, and no module of app/ or engine/
imports one that imports it back (directly or through others). The app's rooms keep their rule:
app.core and app.tools import no Qt, app.session QtCore only, and none of them imports app.ui.
Read from the source with ast, so a lazy import inside a function counts too."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, name: str) -> set[str]:
    """The project modules `name` imports (anywhere in the file, TYPE_CHECKING blocks too: an
    interface that needs its implementation's module for its annotations is a circle as well)."""
    tree = ast.parse(path.read_text("utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names)  # `from . import x` names a module
    return out


def _graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for pkg in ("app", "engine") for p in (ROOT / pkg).rglob("*.py")}
    graph = {}
    for name, path in files.items():
        deps = set()
        for mod in _imports(path, name):
            while mod and mod not in files:  # `engine.models.catalog.find` -> engine.models.catalog
                mod = mod.rpartition(".")[0]
            if mod and mod != name:
                deps.add(mod)
        graph[name] = deps
    return graph


def test_engine_never_imports_the_app():
    bad = {m: sorted(d for d in deps if d.startswith("app")) for m, deps in _graph().items() if m.startswith("engine")}
    assert not {m: d for m, d in bad.items() if d}


# room -> (what its modules may not import: a module name or its prefix, allowed exceptions)
ROOMS = {
    "app.core": (("PySide6", "shiboken6", "pyqtgraph", "app.ui", "app.session", "app.tools"), ()),
    "app.tools": (("PySide6", "shiboken6", "pyqtgraph", "app.ui", "app.session"), ()),
    "app.session": (("PySide6", "shiboken6", "pyqtgraph", "app.ui"), ("PySide6.QtCore",)),
    # the engine: what runs a model and what reads Gemma 4's format never serve HTTP, parse a
    # command line or run a benchmark; the format needs no loaded model (its call grammar is
    # compiled by local.grammar, the one grammar engine, and nothing else of local/)
    "engine.local": (("engine.serve", "engine.cli", "engine.bench", "engine.backends", "fastapi", "starlette"), ()),
    "engine.gemma4": (("engine.serve", "engine.cli", "engine.bench", "engine.backends", "engine.local",
                       "engine.strategies", "fastapi", "starlette"), ("engine.local.grammar",)),
    "engine.strategies": (("engine.serve", "engine.cli", "engine.bench", "engine.backends", "fastapi"), ()),
}


def _room_breaches(name: str, imports: set[str]) -> list[str]:
    room = next((r for r in ROOMS if name == r or name.startswith(r + ".")), None)
    if room is None:
        return []
    banned, allowed = ROOMS[room]
    def under(i, prefixes):
        return any(i == p or i.startswith(p + ".") for p in prefixes)

    # `from PySide6.QtCore import Signal` also names the bare package: allowed when QtCore is
    return sorted(i for i in imports if under(i, banned) and not under(i, allowed)
                  and not (i == "PySide6" and allowed))


def test_the_engine_rooms_keep_their_rule():
    modules = {_module_name(p): p for p in (ROOT / "engine").rglob("*.py")}
    assert {"engine.local", "engine.gemma4", "engine.serve", "engine.cli", "engine.bench", "engine.testmodels"} <= set(modules)
    bad = {name: b for name, path in sorted(modules.items()) if (b := _room_breaches(name, _imports(path, name)))}
    assert not bad, bad


def test_the_rooms_keep_their_rule():
    """A newcomer reads the tree: logic that needs no window lives in app.core (no Qt at all),
    MCP in app.tools (no Qt), what drives the engine off the GUI thread in app.session (QtCore's
    signals and threads, no widgets or QtGui); all of it imports nothing from app.ui."""
    modules = {_module_name(p): p for p in (ROOT / "app").rglob("*.py")}
    assert {"app.core", "app.session", "app.tools", "app.ui", "app.ui.dialogs"} <= set(modules)
    bad = {name: b for name, path in sorted(modules.items()) if (b := _room_breaches(name, _imports(path, name)))}
    assert not bad, bad


def test_the_room_rule_catches_a_breach():
    assert _room_breaches("app.core.store", {"PySide6.QtCore", "PySide6.QtCore.Signal"})
    assert _room_breaches("app.tools.hub", {"PySide6.QtCore"})
    assert _room_breaches("app.session.worker", {"PySide6.QtWidgets", "PySide6.QtWidgets.QLabel"})
    assert _room_breaches("app.session.worker", {"PySide6.QtGui"})
    assert _room_breaches("app.session.worker", {"app.ui.widgets", "app.ui.widgets.MessageWidget"})
    assert _room_breaches("app.core.help_text", {"app.ui", "app.ui.theme"})
    assert not _room_breaches("app.session.worker", {"PySide6.QtCore", "PySide6.QtCore.Signal", "app.core.chat_types"})
    assert not _room_breaches("app.ui.window", {"PySide6.QtWidgets"})
    assert _room_breaches("engine.local.engine", {"engine.serve.request"})
    assert _room_breaches("engine.gemma4.call_grammar", {"engine.local.runtime"})
    assert not _room_breaches("engine.gemma4.call_grammar", {"engine.local.grammar", "engine.local.grammar.from_lark"})


def test_no_import_cycles():
    graph = _graph()
    packages = {m for m in graph if (ROOT / m.replace(".", "/") / "__init__.py").exists()}

    def deps(m):  # a module's own package (its __init__ re-exporting it) is not a circle of design
        return {d for d in graph[m] if not (d in packages and m.startswith(d + "."))}

    cycles = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for d in sorted(deps(m)):
            if state.get(d) == 1:
                cycles.append(stack[stack.index(d):] + [d])
            elif d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


def test_the_architecture_page_names_every_module_and_only_modules_that_exist():
    """docs/architecture.md's Layout is how a newcomer finds the rooms: it drifted (a third of
    the modules were missing), so every module of app/ and engine/ must be named there, and
    every module it names must exist."""
    import re

    text = (ROOT / "docs" / "architecture.md").read_text("utf-8")
    layout = text[text.index("## Layout"):]
    layout = layout[:layout.find("\n## ", 1)] if "\n## " in layout[1:] else layout
    named = {Path(n).name for n in re.findall(r"`([\w/]+\.py)`", layout) if not n.startswith("tests/")}
    modules = {p.name: p for pkg in ("app", "engine") for p in (ROOT / pkg).rglob("*.py") if p.name != "__init__.py"}
    assert sorted(str(p.relative_to(ROOT)) for name, p in modules.items() if name not in named) == []
    assert sorted(named - set(modules)) == []
