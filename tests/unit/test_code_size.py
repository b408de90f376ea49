"""Short modules and functions, so a newcomer can read one at a time: no module of app/ or
engine/ over 450 lines, and no function over 60 lines of its own (a nested function counts as
its own: a FastAPI router's routes are closures over its state, each checked by itself) unless
its docstring says why it is longer (a line starting "Long because")."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 60


def _own_lines(fn: ast.AST) -> int:
    """The function's lines less those of the functions defined inside it."""
    nested = set()
    for n in ast.walk(fn):
        if n is not fn and isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            start = min([d.lineno for d in n.decorator_list] + [n.lineno])
            nested.update(range(start, n.end_lineno + 1))
    return fn.end_lineno - fn.lineno + 1 - len(nested)


def _excused(fn: ast.AST) -> bool:
    doc = ast.get_docstring(fn) or ""
    return any(line.strip().startswith("Long because") for line in doc.splitlines())


def oversized(source: str) -> tuple[int, list[tuple[str, int]]]:
    """(the module's lines, [(function, its own lines)] of the unexcused long functions)."""
    tree = ast.parse(source)
    long = [(f.name, n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
            and (n := _own_lines(f)) > MAX_FUNCTION_LINES and not _excused(f)]
    return len(source.splitlines()), long


def _modules():
    return sorted(p for pkg in ("app", "engine") for p in (ROOT / pkg).rglob("*.py"))


def test_no_module_is_too_long():
    long = {str(p.relative_to(ROOT)): n for p in _modules() if (n := oversized(p.read_text("utf-8"))[0]) > MAX_MODULE_LINES}
    assert not long, long


def test_no_function_is_too_long():
    long = {str(p.relative_to(ROOT)): f for p in _modules() if (f := oversized(p.read_text("utf-8"))[1])}
    assert not long, long


def test_the_rule_counts_what_it_says():
    body = "\n".join(f"    x{i} = {i}" for i in range(61))
    assert oversized(f"def f():\n{body}\n")[1] == [("f", 62)]
    assert oversized(f'def f():\n    """Long because a table."""\n{body}\n')[1] == []
    nested = f"def outer():\n    def inner():\n{body.replace('    ', '        ')}\n    return inner\n"
    assert oversized(nested)[1] == [("inner", 62)]
