"""Message text -> QTextDocument: Markdown (Qt's own parser, raw HTML off, since model output
is untrusted), code blocks highlighted with Pygments with a copy link, and the token-origin
view (drafted-and-accepted tokens tinted)."""

from __future__ import annotations

import html
import re

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import TextLexer, get_lexer_by_name
from pygments.util import ClassNotFound
from PySide6.QtGui import QTextCursor, QTextDocument

from .safe_text import images_to_links

FENCE = re.compile(r"^```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)(?:^```[ \t]*$|\Z)", re.S | re.M)
MD_FEATURES = QTextDocument.MarkdownFeature(
    QTextDocument.MarkdownFeature.MarkdownDialectGitHub.value | QTextDocument.MarkdownFeature.MarkdownNoHTML.value)

DRAFTED_LIGHT, DRAFTED_DARK = "#b7ebc0", "#1f5a2a"
TARGET_LIGHT, TARGET_DARK = "#ffe2b8", "#6b4a12"
LOOKUP_LIGHT, LOOKUP_DARK = "#c9dcff", "#23406e"  # drafted by lookup (copied from the chat) and accepted


# C0 control characters (but tab and newline) have no glyphs: looking for one in every
# fallback font is slow and shows a box, so they are left out of what is displayed.
_CONTROLS = {c: None for c in range(32) if c not in (9, 10)} | {127: None}


def for_display(text: str) -> str:
    return text.translate(_CONTROLS)


def split_code(text: str) -> list[tuple[str, str, str]]:
    """[(kind, lang, body)] with kind 'md' or 'code'; an unclosed fence (still streaming) is code."""
    out, pos = [], 0
    for m in FENCE.finditer(text):
        if m.start() > pos:
            out.append(("md", "", text[pos:m.start()]))
        out.append(("code", m.group(1), m.group(2).rstrip("\n")))
        pos = m.end()
    if pos < len(text):
        out.append(("md", "", text[pos:]))
    return out


def code_html(body: str, lang: str, dark: bool) -> str:
    try:
        lexer = get_lexer_by_name(lang) if lang else TextLexer()
    except ClassNotFound:
        lexer = TextLexer()
    fmt = HtmlFormatter(noclasses=True, nowrap=True, style="monokai" if dark else "friendly")
    bg = "#272822" if dark else "#f4f4f4"
    return (f'<table width="100%" cellpadding="8" style="background:{bg}; margin-top:4px; margin-bottom:4px">'
            f'<tr><td><pre style="white-space:pre">{highlight(body, lexer, fmt)}</pre></td></tr></table>')


def render_markdown(doc: QTextDocument, text: str, dark: bool = False) -> list[str]:
    """Fill `doc` with `text`; returns the code blocks, in order, for the copy links."""
    doc.clear()
    cur = QTextCursor(doc)
    blocks = []
    for kind, lang, body in split_code(for_display(text)):
        if kind == "md":
            if body.strip():
                cur.insertMarkdown(body, MD_FEATURES)
                cur.movePosition(QTextCursor.End)
        else:
            if cur.block().length() > 1:  # the label starts its own line, not the paragraph's end
                cur.insertBlock()
            n = len(blocks)
            blocks.append(body)
            label = html.escape(lang or "code")
            cur.insertHtml(f'<p><span style="color:gray">{label}</span> &nbsp; <a href="copy:{n}">Copy</a></p>')
            cur.insertHtml(code_html(body, lang, dark))
            cur.insertBlock()
    images_to_links(doc)  # model output: show where an image points, never fetch it
    return blocks


def origin_legend_html(dark: bool) -> str:
    """The token-origin legend: chips in the tints render_origins gives the tokens."""
    ink = "#f0f0f0" if dark else "#1a1a1a"
    chips = ((DRAFTED_DARK if dark else DRAFTED_LIGHT, "drafted (MTP), accepted"),
             (LOOKUP_DARK if dark else LOOKUP_LIGHT, "copied (lookup), accepted"),
             (TARGET_DARK if dark else TARGET_LIGHT, "model's own"))
    return "Token origins: " + " ".join(f"<span style='background:{bg}; color:{ink}'>&nbsp;{html.escape(what)}&nbsp;"
                                        "</span>" for bg, what in chips)


def render_origins(doc: QTextDocument, origins: list, dark: bool = False) -> None:
    """Plain text with each token tinted by where it came from."""
    drafted = DRAFTED_DARK if dark else DRAFTED_LIGHT
    target = TARGET_DARK if dark else TARGET_LIGHT
    lookup = LOOKUP_DARK if dark else LOOKUP_LIGHT
    parts = []
    for text, origin in origins:  # origin: True (the drafter's), "lookup", False (the model's own), None
        t = html.escape(for_display(text)).replace("\n", "<br>")
        if origin is None:  # a server does not say which tokens its drafter wrote: no tint
            parts.append(f"<span>{t}</span>")
        else:
            tint = lookup if origin == "lookup" else drafted if origin else target
            parts.append(f'<span style="background:{tint}">{t}</span>')
    doc.setHtml('<p style="white-space:pre-wrap">' + "".join(parts) + "</p>")
