"""Text files as context: source code, Markdown, JSON, logs, CSV — told apart from binaries by
their content (valid UTF-8, or UTF-16/32 declared by a byte-order mark, and no NUL bytes), never
by their suffix. A file goes into the message as a fenced block with its name and language.
No Qt here."""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

MAX_TEXT_BYTES = 4 * 2**20  # one attached text file; a bigger one is no file to read whole
SNIFF_BYTES = 8192  # what a folder scan reads of a file to tell text from binary

_BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF8, "utf-8-sig"),
         (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))


class NotText(ValueError):
    """Bytes that are not a text file: the message says why, in a few words."""


def decode_text(data: bytes, partial: bool = False) -> str:
    """The text of a file's bytes, or NotText. `partial`: the bytes are only the file's start,
    so a multi-byte character cut at the end is no reason to refuse."""
    for bom, enc in _BOMS:  # a declared encoding (checked longest first: UTF-32's mark starts like UTF-16's)
        if data.startswith(bom):
            try:
                text = codecs.getincrementaldecoder(enc)().decode(data, final=not partial)
            except UnicodeDecodeError:
                raise NotText(f"not valid {enc.upper()} text") from None
            if "\x00" in text:
                raise NotText("holds NUL characters (a binary file)")
            return text
    if b"\x00" in data:
        raise NotText("a binary file (it holds NUL bytes)")
    try:
        return codecs.getincrementaldecoder("utf-8")().decode(data, final=not partial)
    except UnicodeDecodeError:
        raise NotText("not UTF-8 text (a binary file, or an encoding without a byte-order mark)") from None


def looks_like_text(head: bytes) -> bool:
    """Whether a file whose first bytes are `head` is text (for scanning many files cheaply)."""
    try:
        decode_text(head, partial=True)
        return True
    except NotText:
        return False


# The suffixes a fence's language label and a Save as… dialog use; anything else is plain text
# (Pygments knows more languages, but its guesses from a name are slow and sometimes odd).
LANGUAGES = {
    ".py": "python", ".pyi": "python", ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript",
    ".ts": "typescript", ".tsx": "tsx", ".jsx": "jsx", ".json": "json", ".md": "markdown", ".rst": "rst",
    ".c": "c", ".h": "c", ".cc": "cpp", ".cpp": "cpp", ".cxx": "cpp", ".hpp": "cpp", ".hh": "cpp",
    ".cs": "csharp", ".java": "java", ".kt": "kotlin", ".go": "go", ".rs": "rust", ".rb": "ruby",
    ".php": "php", ".swift": "swift", ".scala": "scala", ".sh": "bash", ".bash": "bash", ".zsh": "bash",
    ".ps1": "powershell", ".sql": "sql", ".html": "html", ".htm": "html", ".css": "css", ".scss": "scss",
    ".xml": "xml", ".yaml": "yaml", ".yml": "yaml", ".toml": "toml", ".ini": "ini", ".cfg": "ini",
    ".csv": "csv", ".tsv": "csv", ".log": "text", ".txt": "text", ".lua": "lua", ".r": "r", ".jl": "julia",
    ".dart": "dart", ".vue": "vue", ".tex": "latex", ".dockerfile": "docker", ".mk": "make", ".cmake": "cmake",
}
NAMED = {"dockerfile": "docker", "makefile": "make", "cmakelists.txt": "cmake"}
SUFFIX_OF = {}
for _suffix, _lang in LANGUAGES.items():
    SUFFIX_OF.setdefault(_lang, _suffix)  # the first suffix listed is the language's usual one
SUFFIX_OF.update({"py": ".py", "js": ".js", "ts": ".ts", "sh": ".sh", "shell": ".sh", "c++": ".cpp",
                  "rs": ".rs", "yml": ".yml", "text": ".txt", "docker": "Dockerfile"})


def language_of(name: str) -> str:
    """The fence label for a file name ("" when nothing better than plain text is known)."""
    base = PurePosixPath(name.replace("\\", "/")).name.lower()
    lang = NAMED.get(base) or LANGUAGES.get(Path(base).suffix, "")
    return "" if lang == "text" else lang


def suffix_for(language: str) -> str:
    """The usual file suffix for a code block's language label (".txt" when unknown)."""
    lang = language.strip().lower()
    return SUFFIX_OF.get(lang) or next((s for s, l in LANGUAGES.items() if s == "." + lang), ".txt")


def code_fence(text: str, lang: str = "") -> str:
    """`text` in a Markdown code fence longer than any run of backticks inside it (so text
    holding ``` cannot end the block early)."""
    longest = max((len(m) for m in re.findall(r"`{3,}", text)), default=0)
    fence = "`" * max(3, longest + 1)
    body = text if text.endswith("\n") or not text else text + "\n"
    return f"{fence}{lang}\n{body}{fence}"


def fenced(name: str, text: str) -> str:
    """A file as the model reads it: its name, then its text fenced with its language."""
    return f"File: {name}\n" + code_fence(text, language_of(name))


def estimate_tokens(text: str) -> int:
    """Tokens of `text` where no tokenizer can be asked (a server): about four characters a
    token in code and English."""
    return len(text) // 4 + 1


def with_files(text: str, files: list[tuple[str, str]]) -> str:
    """A message's text with its attached text files [(name, text)] before it."""
    blocks = [fenced(name, body) for name, body in files]
    return "\n\n".join(blocks + ([text] if text else []))


@dataclass(frozen=True)
class AttachedFile:
    """A text file attached somewhere in the open chat: what a reply's code block is compared
    with, and where Save over original writes (`source`: the file it was read from, or "")."""

    name: str
    text: str
    source: str = ""


def human_size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    if n < 1024 ** 2:
        return f"{n / 1024:.1f} KB"
    return f"{n / 1024 ** 2:.1f} MB"
