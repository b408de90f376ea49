"""A folder as context: the text files in it, as git would see them. `.gitignore` files (at the
root and in subfolders, with their own folder as base) and `.git/info/exclude` are honoured with
`pathspec`'s GitIgnoreSpec; dependency and build folders are skipped by name; binaries are told
by the start of their content, never by their suffix. The walk is bounded (files listed, entries
looked at) and reads at most SNIFF_BYTES of a file; symlinks never lead out of the folder.
No Qt here."""

from __future__ import annotations

import os
import stat
from collections import Counter, deque
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

from pathspec import GitIgnoreSpec

from .text_files import MAX_TEXT_BYTES, SNIFF_BYTES, NotText, decode_text, looks_like_text

# why an entry is not listed: each reads after a count ("3 ignored by .gitignore")
IGNORED = "ignored by .gitignore"
BINARY = "binary"
TOO_LARGE = "too large"
DEPENDENCY = "dependency or build folder"
UNREADABLE = "unreadable"
OUTSIDE = "linking outside the folder"
LINKED_FOLDER = "linked folder (not followed)"  # a link to a folder inside: its files are listed where they are

# every repository has one: skipped without a word, telling the user would be noise
VCS_DIRS = {".git", ".hg", ".svn"}
DEPENDENCY_DIRS = {"node_modules", "__pycache__", ".venv", "venv", "build", "dist", "target", ".tox", ".nox",
                   ".mypy_cache", ".pytest_cache", ".ruff_cache", ".idea", ".gradle", ".next", ".cache",
                   "coverage", "bower_components", "vendor"}
MAX_IGNORE_BYTES = 1 * 2**20  # a .gitignore bigger than this is no .gitignore
MAX_SKIPPED_LISTED = 500  # skipped entries named one by one (the counts are always whole)


@dataclass(frozen=True)
class FolderFile:
    rel: str  # POSIX path relative to the root
    size: int


@dataclass
class FolderScan:
    root: str
    files: list[FolderFile] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (rel, reason); folders end in "/"
    counts: Counter = field(default_factory=Counter)  # reason -> entries skipped for it
    truncated: bool = False  # a bound was hit: the listing is not the whole folder

    def skip(self, rel: str, reason: str) -> None:
        self.counts[reason] += 1
        if len(self.skipped) < MAX_SKIPPED_LISTED:
            self.skipped.append((rel, reason))


class ReadError(Exception):
    """A listed file that cannot be read as text after all: the message is one line, `reason`
    one of the skip reasons above."""

    def __init__(self, message: str, reason: str = UNREADABLE):
        super().__init__(message)
        self.reason = reason


def _load_spec(path: str) -> GitIgnoreSpec | None:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_IGNORE_BYTES)
    except OSError:
        return None
    lines = data.decode("utf-8", "replace").splitlines()
    spec = GitIgnoreSpec.from_lines(lines)
    return spec if len(spec) else None


def _ignored(chain: tuple[tuple[str, GitIgnoreSpec], ...], rel: str, is_dir: bool) -> bool:
    """Whether git would ignore `rel`: the deepest .gitignore with a matching rule decides, and
    in it the last matching rule (a negation `!` re-includes)."""
    for base, spec in reversed(chain):
        sub = rel[len(base) + 1:] if base else rel
        verdict = spec.check_file(sub + "/" if is_dir else sub).include
        if verdict is not None:
            return verdict
    return False


def _is_dependency(path: str, name: str) -> bool:
    if name in DEPENDENCY_DIRS or name.endswith(".egg-info"):
        return True
    # a virtual environment of any name (env, .env-py311, ...) says so with pyvenv.cfg
    return os.path.isfile(os.path.join(path, "pyvenv.cfg"))


def _inside(real: str, real_root: str) -> bool:
    return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)


def scan(root: str | os.PathLike, max_files: int = 2000, max_visits: int = 50000) -> FolderScan:
    """The text files under `root`, sorted by path (walked breadth first, so a truncated listing
    keeps the top levels), and what was skipped and why. OSError when `root` cannot be listed."""
    real_root = os.path.realpath(root)
    out = FolderScan(str(root))
    base_chain: tuple = ()
    exclude = os.path.join(real_root, ".git", "info", "exclude")
    if os.path.isfile(exclude) and (spec := _load_spec(exclude)):
        base_chain = (("", spec),)  # below the root's .gitignore, as in git
    visits = 0
    queue = deque([(real_root, "", base_chain)])
    while queue and not out.truncated:
        path, rel_dir, chain = queue.popleft()
        try:
            with os.scandir(path) as it:  # one entry past the bound says there are more
                entries = sorted(islice(it, max_visits - visits + 1), key=lambda e: e.name)
        except OSError:
            if not rel_dir:  # the root itself: no listing at all
                raise
            out.skip(rel_dir + "/", UNREADABLE)
            continue
        ignore = os.path.join(path, ".gitignore")
        if os.path.isfile(ignore):
            if _inside(os.path.realpath(ignore), real_root) and (spec := _load_spec(ignore)):
                chain = chain + ((rel_dir, spec),)
        for e in entries:
            visits += 1
            if visits > max_visits or len(out.files) >= max_files:
                out.truncated = True
                break
            if e.name not in VCS_DIRS:  # a submodule's .git is a file
                _visit(e, f"{rel_dir}/{e.name}" if rel_dir else e.name, chain, real_root, out, queue)
    out.files.sort(key=lambda f: f.rel)
    return out


def _visit(e: os.DirEntry, rel: str, chain: tuple, real_root: str, out: FolderScan, queue: deque) -> None:
    """One entry of a listing: a folder to walk (queued) or skipped, a text file listed, or
    why not."""
    try:
        link = e.is_symlink()
        is_dir = e.is_dir(follow_symlinks=False)
    except OSError:
        out.skip(rel, UNREADABLE)
        return
    if is_dir:
        if _is_dependency(e.path, e.name):
            out.skip(rel + "/", DEPENDENCY)
        elif _ignored(chain, rel, True):
            out.skip(rel + "/", IGNORED)
        else:
            queue.append((e.path, rel, chain))
        return
    if _ignored(chain, rel, False):  # git keeps a link as a file: its rules match it so
        out.skip(rel, IGNORED)
        return
    target = e.path
    if link:
        target = os.path.realpath(e.path)
        if not _inside(target, real_root):
            out.skip(rel, OUTSIDE)
            return
        if os.path.isdir(target):
            out.skip(rel, LINKED_FOLDER)
            return
    reason, size = _sniff(target)
    if reason:
        out.skip(rel, reason)
    else:
        out.files.append(FolderFile(rel, size))


def _sniff(path: str) -> tuple[str, int]:
    """("", size) for a text file, else (reason, 0); reads SNIFF_BYTES at most."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):  # a FIFO or device would block or never end
            return UNREADABLE, 0
        if st.st_size > MAX_TEXT_BYTES:
            return TOO_LARGE, 0
        with open(path, "rb") as f:
            head = f.read(SNIFF_BYTES)
    except OSError:
        return UNREADABLE, 0
    return ("", st.st_size) if looks_like_text(head) else (BINARY, 0)


def read(root: str | os.PathLike, rel: str) -> str:
    """A listed file's whole text, or ReadError in one line (it may have changed since the scan)."""
    real_root = os.path.realpath(root)
    path = os.path.realpath(os.path.join(real_root, *rel.split("/")))
    if not _inside(path, real_root):
        raise ReadError(f"{rel}: leads outside the folder", OUTSIDE)
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # checked before opening: a FIFO's open blocks
            raise ReadError(f"{rel}: not a regular file")
        with open(path, "rb") as f:
            data = f.read(MAX_TEXT_BYTES + 1)
    except OSError as e:
        raise ReadError(f"{rel}: cannot be read ({e.strerror or e})") from None
    if len(data) > MAX_TEXT_BYTES:
        raise ReadError(f"{rel}: over the {MAX_TEXT_BYTES // 2**20} MB Tandem reads whole", TOO_LARGE)
    try:
        return decode_text(data)
    except NotText as e:
        raise ReadError(f"{rel}: {e}", BINARY) from None


def source_path(root: str | os.PathLike, rel: str) -> str:
    """The absolute path a listed file was read from (where Save over original writes)."""
    return str(Path(root).resolve().joinpath(*rel.split("/")))
