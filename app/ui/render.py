"""Message text -> QTextDocument: Markdown (Qt's own parser, raw HTML off, since model output
is untrusted), code blocks highlighted with Pygments under a header of their language and links
(Copy, Save as…, Diff with the attached file the block rewrites), and the token-origin view
(drafted-and-accepted tokens tinted)."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from typing import NamedTuple

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import TextLexer, get_lexer_by_name
from pygments.util import ClassNotFound
from PySide6.QtGui import QGuiApplication, QTextCharFormat, QTextCursor, QTextDocument, QTextFormat

from app.core.code_match import BEFORE_CHARS, match_file
from .safe_text import fragments, images_to_links
from app.core.text_files import AttachedFile, language_of

# a block runs to its closing fence, or to the end of the text: "close" tells which
FENCE = re.compile(r"^```[ \t]*([^\n]*)\n(.*?)(?:^(?P<close>```)[ \t]*$|\Z)", re.S | re.M)
LANG = re.compile(r"[\w+#.-]*")  # the language label: the info string's first word
MD_FEATURES = QTextDocument.MarkdownFeature(
    QTextDocument.MarkdownFeature.MarkdownDialectGitHub.value | QTextDocument.MarkdownFeature.MarkdownNoHTML.value)
# marks the header links render_markdown writes: model text may hold links that look the same
OUR_LINK = QTextFormat.UserProperty + 1
COPIED = "Copied ✓"

DRAFTED_LIGHT, DRAFTED_DARK = "#b7ebc0", "#1f5a2a"
TARGET_LIGHT, TARGET_DARK = "#ffe2b8", "#6b4a12"
LOOKUP_LIGHT, LOOKUP_DARK = "#c9dcff", "#23406e"  # drafted by lookup (copied from the chat) and accepted


# C0 control characters (but tab and newline) have no glyphs: looking for one in every
# fallback font is slow and shows a box, so they are left out of what is displayed.
_CONTROLS = {c: None for c in range(32) if c not in (9, 10)} | {127: None}


def for_display(text: str) -> str:
    return text.translate(_CONTROLS)


class Part(NamedTuple):
    """A stretch of a message: Markdown, or a code block with its fence's info string and the
    Markdown just before it (where a reply names the file the block rewrites)."""

    kind: str  # "md" or "code"
    text: str
    lang: str = ""
    info: str = ""
    before: str = ""
    closed: bool = True  # False: the text ended inside the block (still streaming, or the reply was cut off)


@dataclass(frozen=True)
class CodeBlock:
    """A rendered code block, what its header links act on."""

    code: str
    lang: str
    match: AttachedFile | None = None  # the attached file it is a new version of


def split_code(text: str) -> list[Part]:
    """The message's Markdown and code parts, in order; an unclosed fence (still streaming) is code."""
    out, pos = [], 0
    for m in FENCE.finditer(text):
        if m.start() > pos:
            out.append(Part("md", text[pos:m.start()]))
        info = m.group(1).strip()
        lang = LANG.match(info).group()
        if "." in lang and language_of(lang):  # ```app.py: a file name, its language is known
            lang = language_of(lang)
        before = text[max(pos, m.start() - BEFORE_CHARS):m.start()]
        out.append(Part("code", m.group(2).rstrip("\n"), lang, info, before, m.group("close") is not None))
        pos = m.end()
    if pos < len(text):
        out.append(Part("md", text[pos:]))
    return out


def cut_off(text: str, code: str) -> bool:
    """Whether `code`, a code block of the message `text`, never got its closing fence: the
    reply stopped inside it (max tokens, a full context, Stop, an error), so it is the first
    part of a file at most, never a whole one to save over the original."""
    return any(p.kind == "code" and not p.closed and p.text == code for p in split_code(for_display(text)))


def code_html(body: str, lang: str, dark: bool) -> str:
    try:
        lexer = get_lexer_by_name(lang) if lang else TextLexer()
    except ClassNotFound:
        lexer = TextLexer()
    fmt = HtmlFormatter(noclasses=True, nowrap=True, style="monokai" if dark else "friendly")
    bg = "#272822" if dark else "#f4f4f4"
    return (f'<table width="100%" cellpadding="8" style="background:{bg}; margin-top:4px; margin-bottom:4px">'
            f'<tr><td><pre style="white-space:pre">{highlight(body, lexer, fmt)}</pre></td></tr></table>')


def _link(href: str) -> QTextCharFormat:
    fmt = QTextCharFormat()
    fmt.setAnchor(True)
    fmt.setAnchorHref(href)
    fmt.setFontUnderline(True)
    fmt.setForeground(QGuiApplication.palette().link())
    fmt.setProperty(OUR_LINK, True)
    return fmt


def render_markdown(doc: QTextDocument, text: str, dark: bool = False, files: list[AttachedFile] = (),
                    copied: int | None = None) -> list[CodeBlock]:
    """Fill `doc` with `text`; returns the code blocks, in order, for their header links
    (copy:N, save:N, diff:N). `files`: the chat's attached text files, offered for a diff when
    a block is a new version of one; `copied`: the block whose Copy link reads COPIED."""
    doc.clear()
    cur = QTextCursor(doc)
    gray = QTextCharFormat()
    gray.setForeground(QGuiApplication.palette().placeholderText())
    blocks = []
    for part in split_code(for_display(text)):
        if part.kind == "md":
            if part.text.strip():
                cur.insertMarkdown(part.text, MD_FEATURES)
                cur.movePosition(QTextCursor.End)
            continue
        if cur.block().length() > 1:  # the label starts its own line, not the paragraph's end
            cur.insertBlock()
        n = len(blocks)
        match = match_file(part.text, part.info, part.before, files) if files else None
        blocks.append(CodeBlock(part.text, part.lang, match))
        cur.insertText(part.lang or "code", gray)
        links = [(f"copy:{n}", COPIED if n == copied else "Copy"), (f"save:{n}", "Save as…")]
        if match is not None:
            links.append((f"diff:{n}", f"Diff with {match.name}"))
        for href, label in links:
            cur.insertText("   ", QTextCharFormat())
            cur.insertText(label, _link(href))
        cur.insertHtml(code_html(part.text, part.lang, dark))
        cur.insertBlock()
    images_to_links(doc)  # model output: show where an image points, never fetch it
    return blocks


def relabel_link(doc: QTextDocument, href: str, label: str) -> None:
    """Change the text of our header link `href` in place (a Copy link's "Copied ✓"): no
    re-render, so the layout and the user's selection stay as they are."""
    found = [(f.position(), f.length(), f.charFormat()) for f in fragments(doc)
             if f.charFormat().property(OUR_LINK) and f.charFormat().anchorHref() == href]
    for pos, length, fmt in reversed(found):
        cur = QTextCursor(doc)
        cur.setPosition(pos)
        cur.setPosition(pos + length, QTextCursor.KeepAnchor)
        cur.insertText(label, fmt)


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
