"""What came of a call: a result as text (pictures, sounds and binary resources described, never
passed on), or one line saying what went wrong — the exit code of a server that stopped, the
first real error inside exception groups."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

import anyio

from .config import one_line

MAX_RESULT_CHARS = 50_000  # a result longer than this does not go to the model (callers may pass less)


@dataclass
class ToolOutcome:
    """What came of one call: the result text (kind "ok"), else one line saying what happened."""

    kind: str  # "ok" | "error" | "timeout" | "crashed" | "too_large" | "unknown"
    text: str

    @property
    def ok(self) -> bool:
        return self.kind == "ok"


def _b64_bytes(data) -> int:
    return len(data) * 3 // 4 - data.count("=", -2) if isinstance(data, str) else 0


def result_text(result: dict) -> str:
    """A CallToolResult (as a camelCase dict) as text: text joined; pictures, sounds and
    binary resources described; structured content as JSON when nothing else came."""
    parts = []
    for c in result.get("content") or []:
        if not isinstance(c, dict):
            continue
        kind = c.get("type")
        if kind == "text":
            parts.append(str(c.get("text") or ""))
        elif kind in ("image", "audio"):
            parts.append(f"[{c.get('mimeType') or kind}, {_b64_bytes(c.get('data')):,} bytes]")
        elif kind == "resource_link":
            parts.append(f"[link: {one_line(c.get('name') or '')} {one_line(c.get('uri') or '')}]")
        elif kind == "resource":
            r = c.get("resource") if isinstance(c.get("resource"), dict) else {}
            if isinstance(r.get("text"), str):
                parts.append(r["text"])
            else:
                parts.append(f"[{r.get('mimeType') or 'data'}, {_b64_bytes(r.get('blob')):,} bytes: "
                             f"{one_line(r.get('uri') or '')}]")
        else:
            parts.append(f"[{one_line(kind or 'unknown')} content]")
    text = "\n".join(parts)
    if not text.strip() and result.get("structuredContent") is not None:
        text = json.dumps(result["structuredContent"], ensure_ascii=False)
    return text


def exit_text(rc) -> str:
    if rc is None:
        return ""
    return f"killed by signal {-rc}" if rc < 0 else f"exit code {rc}"


def leaf_error(e: BaseException) -> BaseException:
    """The first real error inside (nested) exception groups."""
    while isinstance(e, BaseExceptionGroup):
        cancelled = (asyncio.CancelledError, anyio.get_cancelled_exc_class())
        inner = [x for x in e.exceptions if not isinstance(x, cancelled)]
        e = (inner or list(e.exceptions))[0]
    return e


def error_line(e: BaseException) -> str:
    e = leaf_error(e)
    msg = one_line(e)
    return f"{type(e).__name__}: {msg}" if msg else type(e).__name__
