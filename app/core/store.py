"""Conversations on disk: SQLite in WAL mode under the platformdirs user data folder.

Messages form a tree: each points to the message it answers or follows (`parent_id`), so an
edited question or a regenerated answer is a new sibling and every version is kept. A chat
shows one path through the tree, from its root to the conversation's `leaf_id`.

Messages are written while they stream (at most about once a second), so a crash loses at
most the last second of a reply. A daily backup (SQLite's online backup API) is kept next to
the database, and a damaged database is moved aside and rebuilt from it. No Qt here.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import store_backup
from .chat_types import ChatOptions
from .text_files import code_fence

SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    settings TEXT NOT NULL DEFAULT '{}',
    leaf_id INTEGER
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL,
    content TEXT NOT NULL DEFAULT '',
    thinking TEXT NOT NULL DEFAULT '',
    stats TEXT,
    origins TEXT,
    created REAL NOT NULL,
    parent_id INTEGER,
    media TEXT,
    tool TEXT
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages(conversation_id, id);
"""

# Databases from before branches: add the columns, then chain each chat's messages in order
# (what they were: one straight line) and point the chat at its last message.
MIGRATIONS = [
    ("conversations", "leaf_id", "ALTER TABLE conversations ADD COLUMN leaf_id INTEGER"),
    ("messages", "parent_id", "ALTER TABLE messages ADD COLUMN parent_id INTEGER"),
]
LATER_COLUMNS = [("messages", "media", "ALTER TABLE messages ADD COLUMN media TEXT"),  # no data to move
                 ("messages", "tool", "ALTER TABLE messages ADD COLUMN tool TEXT")]
CHAIN_OLD_MESSAGES = """
UPDATE messages SET parent_id = (SELECT MAX(p.id) FROM messages p
    WHERE p.conversation_id = messages.conversation_id AND p.id < messages.id);
UPDATE conversations SET leaf_id = (SELECT MAX(id) FROM messages m WHERE m.conversation_id = conversations.id);
"""


@dataclass
class Message:
    id: int
    role: str
    content: str = ""
    thinking: str = ""
    stats: dict | None = None
    # [[text, drafted], ...] pieces of the answer, for the token-origin view
    origins: list | None = None
    parent_id: int | None = None
    # attached pictures and sounds: [{"sha256", "name", "kind", "ext"}], files in the attachments folder
    media: list = field(default_factory=list)
    # the versions of this message (siblings under the same parent, oldest first) and which one it is
    versions: int = 1
    version: int = 1
    # tools: an answer's calls {"calls": [{"id", "name", "arguments"}]}, or a tool message's
    # {"call_id", "name", "kind"} (its content is the result, or the line saying why there is none)
    tool: dict | None = None

    @property
    def calls(self) -> list:
        return list((self.tool or {}).get("calls") or []) if self.role == "assistant" else []

    def as_chat(self) -> dict:
        d = {"role": self.role, "content": self.content}
        if self.calls:  # the template writes them in the model's own call syntax
            d["tool_calls"] = [{"id": c["id"], "type": "function",
                                "function": {"name": c["name"], "arguments": c.get("arguments") or {}}}
                               for c in self.calls]
        if self.role == "tool" and self.tool:
            d["tool_call_id"], d["name"] = self.tool.get("call_id", ""), self.tool.get("name", "")
        return d


@dataclass
class Conversation:
    id: int
    title: str
    updated: float
    options: ChatOptions = ChatOptions()  # the chat's own switches (stored as JSON in `settings`)


FENCE_LINE = re.compile(r"^\s*(```|~~~)")


def chat_title(text: str, limit: int = 48) -> str:
    """A chat's title from its first message: the first line of prose (not code, not a fence),
    Markdown marks dropped, cut at a word."""
    in_code = False
    for line in text.splitlines():
        if FENCE_LINE.match(line):
            in_code = not in_code
            continue
        words = re.sub(r"^[#>*\-+\s]+|[*_`]", "", line).split() if not in_code else []
        if words:
            title = " ".join(words)
            if len(title) > limit:
                title = title[:limit].rsplit(" ", 1)[0].rstrip(",.;:") + "…"
            return title
    return "Code snippet" if text.strip() else "New chat"


def _tool_of(raw) -> dict | None:
    try:
        d = json.loads(raw) if raw else None
    except ValueError:
        return None
    return d if isinstance(d, dict) else None


def _media_list(raw) -> list:
    try:
        items = json.loads(raw) if raw else []
    except ValueError:
        return []
    return [m for m in items if isinstance(m, dict)] if isinstance(items, list) else []


def file_name(title: str) -> str:
    """A title made safe as a file name on every platform."""
    name = re.sub(r'[\\/:*?"<>|\x00-\x1f]+', " ", title).strip(" .")
    return name[:80] or "chat"


def _closed_fences(text: str) -> str:
    """Markdown whose last code fence is closed (a reply cut off inside a code block)."""
    open_fence = sum(1 for line in text.splitlines() if FENCE_LINE.match(line)) % 2
    return text + ("\n```" if open_fence else "")


def default_db_path() -> Path:
    from platformdirs import user_data_dir

    d = Path(user_data_dir("Tandem", appauthor=False))
    d.mkdir(parents=True, exist_ok=True)
    return d / "conversations.sqlite3"


class Store:
    """The chat database. A damaged file never stops the app: it is moved aside, the newest
    backup is restored, whatever rows can still be read are added back, and `recovered`
    says so in one message for the user."""

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path else default_db_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.backup_dir = self.path.parent / "backups"
        self.recovered: str | None = None
        try:
            self._open()
            if self.db.execute("PRAGMA quick_check").fetchone()[0] != "ok":
                raise sqlite3.DatabaseError("integrity check failed")
        except sqlite3.OperationalError:
            raise  # locked, read-only, disk full: not damage, nothing to move aside
        except sqlite3.DatabaseError as e:  # not a database, malformed
            self._recover(e)
        self.backup_if_due()

    def _open(self) -> None:
        self.db = sqlite3.connect(str(self.path))
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA foreign_keys=ON")
        self.db.executescript(SCHEMA)
        migrated = False
        for table, column, sql in MIGRATIONS:
            if column not in {r[1] for r in self.db.execute(f"PRAGMA table_info({table})")}:
                self.db.execute(sql)
                migrated = True
        if migrated:
            self.db.executescript(CHAIN_OLD_MESSAGES)
        for table, column, sql in LATER_COLUMNS:
            if column not in {r[1] for r in self.db.execute(f"PRAGMA table_info({table})")}:
                self.db.execute(sql)
        self.db.execute("CREATE INDEX IF NOT EXISTS messages_by_parent ON messages(conversation_id, parent_id)")
        self.db.commit()

    # ---- damage and backups (store_backup) -----------------------------------------------
    def _recover(self, error: Exception) -> None:
        """Move the damaged file aside, restore the newest backup, add back what can be read."""
        try:
            self.db.close()
        except Exception:
            pass
        damaged, backup = store_backup.replace_damaged(self.path, self.backup_dir)
        self._open()
        salvaged = store_backup.salvage(self.db, damaged)
        n = self.db.execute("SELECT COUNT(*) FROM conversations").fetchone()[0]
        self.recovered = store_backup.recovery_note(error, damaged, backup, n, salvaged)

    def backups(self) -> list[Path]:
        """The daily backups kept, oldest first."""
        return store_backup.backups(self.backup_dir)

    def backup_if_due(self, now: float | None = None) -> Path | None:
        """A consistent copy, at most once a day; the newest few are kept."""
        return store_backup.backup_if_due(self.db, self.backup_dir, now)

    def close(self) -> None:
        self.db.close()

    # conversations
    def create_conversation(self, title: str = "New chat", options: ChatOptions | None = None) -> int:
        now = time.time()
        cur = self.db.execute("INSERT INTO conversations(title, created, updated, settings) VALUES (?,?,?,?)",
                              (title, now, now, json.dumps((options or ChatOptions()).stored())))
        self.db.commit()
        return cur.lastrowid

    def conversations(self, search: str = "") -> list[Conversation]:
        if search:
            like = f"%{search}%"
            rows = self.db.execute(
                "SELECT DISTINCT c.id, c.title, c.updated, c.settings FROM conversations c "
                "LEFT JOIN messages m ON m.conversation_id = c.id "
                "WHERE c.title LIKE ? OR m.content LIKE ? ORDER BY c.updated DESC", (like, like)).fetchall()
        else:
            rows = self.db.execute("SELECT id, title, updated, settings FROM conversations ORDER BY updated DESC").fetchall()
        return [Conversation(r[0], r[1], r[2], ChatOptions.from_stored(json.loads(r[3] or "{}"))) for r in rows]

    def conversation(self, cid: int) -> Conversation | None:
        r = self.db.execute("SELECT id, title, updated, settings FROM conversations WHERE id=?", (cid,)).fetchone()
        return Conversation(r[0], r[1], r[2], ChatOptions.from_stored(json.loads(r[3] or "{}"))) if r else None

    def rename(self, cid: int, title: str) -> None:
        self.db.execute("UPDATE conversations SET title=? WHERE id=?", (title, cid))
        self.db.commit()

    def update_chat_options(self, cid: int, **changes) -> ChatOptions:
        """Change some of a chat's options (ChatOptions' fields), keeping the rest; the new options."""
        c = self.conversation(cid)
        options = (c.options if c else ChatOptions()).but(**changes)
        self.db.execute("UPDATE conversations SET settings=? WHERE id=?", (json.dumps(options.stored()), cid))
        self.db.commit()
        return options

    def delete_conversation(self, cid: int) -> None:
        self.db.execute("DELETE FROM conversations WHERE id=?", (cid,))
        self.db.commit()

    # messages: a tree, shown as the path from the root to the chat's leaf
    def _leaf(self, cid: int) -> int | None:
        r = self.db.execute("SELECT leaf_id FROM conversations WHERE id=?", (cid,)).fetchone()
        return r[0] if r else None

    def _children(self, cid: int, parent: int | None) -> list[int]:
        return [r[0] for r in self.db.execute(
            "SELECT id FROM messages WHERE conversation_id=? AND parent_id IS ? ORDER BY id", (cid, parent))]

    def messages(self, cid: int, upto: int | None = None) -> list[Message]:
        """The chat as shown: the path from the root to its leaf (or to message `upto`),
        each message with how many versions it has and which one this is."""
        rows = {r[0]: r for r in self.db.execute(
            "SELECT id, role, content, thinking, stats, origins, parent_id, media, tool FROM messages "
            "WHERE conversation_id=?", (cid,))}
        path, mid = [], upto if upto is not None else self._leaf(cid)
        while mid is not None and mid in rows and len(path) <= len(rows):  # bounded: a damaged cycle ends
            path.append(rows[mid])
            mid = rows[mid][6]
        out = []
        for r in reversed(path):
            sibs = self._children(cid, r[6])
            out.append(Message(r[0], r[1], r[2], r[3], json.loads(r[4]) if r[4] else None,
                               json.loads(r[5]) if r[5] else None, r[6], _media_list(r[7]), len(sibs),
                               sibs.index(r[0]) + 1, _tool_of(r[8])))
        return out

    def add_message(self, cid: int, role: str, content: str = "", thinking: str = "",
                    parent: int | None | str = "leaf", media: list | None = None, tool: dict | None = None) -> int:
        """A new message after `parent` (default: the chat's leaf), which becomes the leaf.
        A parent that already has children makes this a new version beside them. `media`:
        what `save_attachment` returned for each attached file."""
        now = time.time()
        parent_id = self._leaf(cid) if parent == "leaf" else parent
        cur = self.db.execute("INSERT INTO messages(conversation_id, role, content, thinking, created, parent_id, "
                              "media, tool) VALUES (?,?,?,?,?,?,?,?)",
                              (cid, role, content, thinking, now, parent_id, json.dumps(media) if media else None,
                               json.dumps(tool) if tool else None))
        self.db.execute("UPDATE conversations SET updated=?, leaf_id=? WHERE id=?", (now, cur.lastrowid, cid))
        self.db.commit()
        return cur.lastrowid

    def update_message(self, mid: int, content: str, thinking: str = "", stats: dict | None = None,
                       origins: list | None = None) -> None:
        self.db.execute("UPDATE messages SET content=?, thinking=?, stats=?, origins=? WHERE id=?",
                        (content, thinking, json.dumps(stats) if stats is not None else None,
                         json.dumps(origins) if origins is not None else None, mid))
        self.db.commit()

    def set_tool(self, mid: int, tool: dict | None) -> None:
        """An answer's tool calls (or a tool message's call), once known."""
        self.db.execute("UPDATE messages SET tool=? WHERE id=?", (json.dumps(tool) if tool else None, mid))
        self.db.commit()

    # attachments: content-addressed files beside the database, shared by every message that uses them
    @property
    def attachments_dir(self) -> Path:
        return self.path.parent / "attachments"

    def save_attachment(self, data: bytes, name: str, kind: str, source: str = "") -> dict:
        """Keep an attached file; `source`: the file it was read from (a text file's original,
        for Save over original), kept as a name only: nothing is ever read from it again."""
        digest = hashlib.sha256(data).hexdigest()
        ext = (Path(name).suffix.lower()[:8] or ".bin") if re.fullmatch(r"\.[a-z0-9]{1,7}", Path(name).suffix.lower()) \
            else ".bin"
        self.attachments_dir.mkdir(parents=True, exist_ok=True)
        path = self.attachments_dir / f"{digest}{ext}"
        if not path.exists():
            tmp = path.with_suffix(path.suffix + ".tmp")
            tmp.write_bytes(data)
            os.replace(tmp, path)
        return {"sha256": digest, "name": name[:200], "kind": kind, "ext": ext} | ({"source": source[:4096]} if source else {})

    def attachment_path(self, item: dict) -> Path | None:
        """The file of one attachment, or None if the entry is malformed (never a path it names)."""
        digest, ext = str(item.get("sha256", "")), str(item.get("ext", ""))
        if not re.fullmatch(r"[0-9a-f]{64}", digest) or not re.fullmatch(r"\.[a-z0-9]{1,7}", ext):
            return None
        return self.attachments_dir / f"{digest}{ext}"

    def parent_of(self, mid: int) -> int | None:
        r = self.db.execute("SELECT parent_id FROM messages WHERE id=?", (mid,)).fetchone()
        return r[0] if r else None

    def show_version(self, cid: int, mid: int, step: int) -> int | None:
        """Switch message `mid` to its previous (-1) or next (+1) version; the chat then
        follows that version's newest continuation down to a leaf. Returns the version shown."""
        sibs = self._children(cid, self.parent_of(mid))
        if mid not in sibs:
            return None
        other = sibs[max(0, min(len(sibs) - 1, sibs.index(mid) + step))]
        leaf = other
        for _ in range(100000):  # bounded walk down the newest children
            kids = self._children(cid, leaf)
            if not kids:
                break
            leaf = kids[-1]
        self.db.execute("UPDATE conversations SET leaf_id=? WHERE id=?", (leaf, cid))
        self.db.commit()
        return other

    def delete_message(self, cid: int, mid: int) -> None:
        """Remove one message without children (a reply that never started); the chat's leaf
        moves back to its parent."""
        parent = self.parent_of(mid)
        if self._children(cid, mid):
            raise ValueError("the message has replies")
        self.db.execute("DELETE FROM messages WHERE conversation_id=? AND id=?", (cid, mid))
        if self._leaf(cid) == mid:
            self.db.execute("UPDATE conversations SET leaf_id=? WHERE id=?", (parent, cid))
        self.db.commit()

    # export
    def export_markdown(self, cid: int) -> str:
        """The chat as shown, with its attached files by name, its tool calls and their results."""
        c = self.conversation(cid)
        out = [f"# {c.title}\n"]
        for m in self.messages(cid):
            if m.role == "tool":
                t = m.tool or {}
                out.append(f"**Tool result** (`{t.get('name', '')}`, {t.get('kind', 'ok')}):\n\n"
                           f"{code_fence(m.content)}\n")
                continue
            who = {"user": "You", "assistant": "Gemma", "system": "System"}.get(m.role, m.role)
            files = ", ".join(f"`{i.get('name', '')}`" for i in m.media)
            out.append(f"**{who}:**" + (f" (attached: {files})" if files else "") +
                       (f"\n\n{_closed_fences(m.content)}" if m.content else "") + "\n")
            for call in m.calls:
                out.append(f"**Gemma called** `{call.get('name', '')}` with:\n\n"
                           f"{code_fence(json.dumps(call.get('arguments') or {}, indent=2, ensure_ascii=False), 'json')}\n")
            if m.stats and m.stats.get("footer"):
                out.append(f"*{m.stats['footer']}*\n")
        return "\n".join(out)

    def export_json(self, cid: int, models: dict | None = None, app_settings: dict | None = None) -> str:
        c = self.conversation(cid)
        return json.dumps({
            "title": c.title, "settings": c.options.stored(), "models": models or {}, "generation": app_settings or {},
            "messages": [_exported(m) for m in self.messages(cid)],
        }, indent=2, ensure_ascii=False)


def _exported(m: Message) -> dict:
    """One message for the JSON export: OpenAI's shape for tool calls and results, and the
    attached files by name, kind and content hash."""
    d = {"role": m.role, "content": m.content, "thinking": m.thinking, "stats": m.stats}
    if m.media:
        d["attachments"] = [{k: i.get(k) for k in ("name", "kind", "sha256", "source") if i.get(k)} for i in m.media]
    chat = m.as_chat()
    if "tool_calls" in chat:
        d["tool_calls"] = [{"id": c["id"], "type": "function", "function": {
            "name": c["function"]["name"], "arguments": json.dumps(c["function"]["arguments"], ensure_ascii=False)}}
            for c in chat["tool_calls"]]
    if m.role == "tool":
        d["tool_call_id"], d["name"] = chat.get("tool_call_id", ""), chat.get("name", "")
        d["outcome"] = (m.tool or {}).get("kind", "ok")
    return d
