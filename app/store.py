"""Conversations on disk: SQLite in WAL mode under the platformdirs user data folder.

Messages are written while they stream (at most about once a second), so a crash loses at
most the last second of a reply. A daily backup (SQLite's online backup API) is kept next to
the database, and a damaged database is moved aside and rebuilt from it. No Qt here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    settings TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL,
    content TEXT NOT NULL DEFAULT '',
    thinking TEXT NOT NULL DEFAULT '',
    stats TEXT,
    origins TEXT,
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages(conversation_id, id);
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

    def as_chat(self) -> dict:
        return {"role": self.role, "content": self.content}


@dataclass
class Conversation:
    id: int
    title: str
    updated: float
    settings: dict = field(default_factory=dict)


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


BACKUP_INTERVAL_S = 24 * 3600  # a backup a day while the app is used
BACKUPS_KEPT = 3


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
        self.db.commit()

    # ---- damage and backups -------------------------------------------------------------
    def _recover(self, error: Exception) -> None:
        try:
            self.db.close()
        except Exception:
            pass
        stamp = time.strftime("%Y%m%d-%H%M%S")
        damaged = self.path.with_name(f"{self.path.name}.damaged-{stamp}")
        os.replace(self.path, damaged)
        for suffix in ("-wal", "-shm"):  # SQLite's side files belong to the damaged copy
            side = self.path.with_name(self.path.name + suffix)
            if side.exists():
                os.replace(side, damaged.with_name(damaged.name + suffix))
        backup = self._newest_backup()
        if backup is not None:
            shutil.copyfile(backup, self.path)
        self._open()
        salvaged = self._salvage(damaged)
        n = self.db.execute("SELECT COUNT(*) FROM conversations").fetchone()[0]
        source = f"the backup of {time.strftime('%Y-%m-%d %H:%M', time.localtime(backup.stat().st_mtime))}" \
            if backup else "no backup"
        self.recovered = (f"The chat history file was damaged ({error}). It was kept as {damaged}. "
                          f"Restored {n} chats from {source}"
                          + (f" and {salvaged} messages still readable in the damaged file." if salvaged else "."))

    def _salvage(self, damaged: Path) -> int:
        """Copy every row still readable in the damaged file that the restored database
        lacks; reading stops at the first damaged page of each table."""
        added = 0
        try:
            old = sqlite3.connect(f"file:{damaged}?mode=ro", uri=True)
        except sqlite3.Error:
            return 0
        try:
            for table, cols in (("conversations", "id, title, created, updated, settings"),
                                ("messages", "id, conversation_id, role, content, thinking, stats, origins, created")):
                try:
                    for row in old.execute(f"SELECT {cols} FROM {table} ORDER BY id"):
                        try:
                            cur = self.db.execute(f"INSERT OR IGNORE INTO {table}({cols}) VALUES "
                                                  f"({','.join('?' * len(row))})", row)
                            added += cur.rowcount if table == "messages" else 0
                        except sqlite3.Error:  # e.g. a message whose chat was lost
                            continue
                except sqlite3.Error:
                    continue
            self.db.commit()
        finally:
            old.close()
        return added

    def _backups(self) -> list[Path]:
        return sorted(self.backup_dir.glob("conversations-*.sqlite3")) if self.backup_dir.is_dir() else []

    def _newest_backup(self) -> Path | None:
        for b in reversed(self._backups()):
            try:
                con = sqlite3.connect(f"file:{b}?mode=ro", uri=True)
                try:
                    if con.execute("PRAGMA quick_check").fetchone()[0] == "ok":
                        return b
                finally:
                    con.close()
            except sqlite3.Error:
                continue
        return None

    def backup_if_due(self, now: float | None = None) -> Path | None:
        """A consistent copy with SQLite's online backup API, at most once per interval;
        the newest BACKUPS_KEPT are kept."""
        now = time.time() if now is None else now
        backups = self._backups()
        if backups and now - backups[-1].stat().st_mtime < BACKUP_INTERVAL_S:
            return None
        self.backup_dir.mkdir(parents=True, exist_ok=True)
        dest = self.backup_dir / f"conversations-{time.strftime('%Y%m%d-%H%M%S', time.localtime(now))}.sqlite3"
        try:
            target = sqlite3.connect(str(dest))
            try:
                self.db.backup(target)
            finally:
                target.close()
        except sqlite3.Error:
            dest.unlink(missing_ok=True)
            return None
        for old in self._backups()[:-BACKUPS_KEPT]:
            old.unlink(missing_ok=True)
        return dest

    def close(self) -> None:
        self.db.close()

    # conversations
    def create_conversation(self, title: str = "New chat", settings: dict | None = None) -> int:
        now = time.time()
        cur = self.db.execute("INSERT INTO conversations(title, created, updated, settings) VALUES (?,?,?,?)",
                              (title, now, now, json.dumps(settings or {})))
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
        return [Conversation(r[0], r[1], r[2], json.loads(r[3] or "{}")) for r in rows]

    def conversation(self, cid: int) -> Conversation | None:
        r = self.db.execute("SELECT id, title, updated, settings FROM conversations WHERE id=?", (cid,)).fetchone()
        return Conversation(r[0], r[1], r[2], json.loads(r[3] or "{}")) if r else None

    def rename(self, cid: int, title: str) -> None:
        self.db.execute("UPDATE conversations SET title=? WHERE id=?", (title, cid))
        self.db.commit()

    def set_conversation_settings(self, cid: int, settings: dict) -> None:
        self.db.execute("UPDATE conversations SET settings=? WHERE id=?", (json.dumps(settings), cid))
        self.db.commit()

    def delete_conversation(self, cid: int) -> None:
        self.db.execute("DELETE FROM conversations WHERE id=?", (cid,))
        self.db.commit()

    # messages
    def messages(self, cid: int) -> list[Message]:
        rows = self.db.execute("SELECT id, role, content, thinking, stats, origins FROM messages "
                               "WHERE conversation_id=? ORDER BY id", (cid,)).fetchall()
        return [Message(r[0], r[1], r[2], r[3], json.loads(r[4]) if r[4] else None,
                        json.loads(r[5]) if r[5] else None) for r in rows]

    def add_message(self, cid: int, role: str, content: str = "", thinking: str = "") -> int:
        now = time.time()
        cur = self.db.execute("INSERT INTO messages(conversation_id, role, content, thinking, created) VALUES (?,?,?,?,?)",
                              (cid, role, content, thinking, now))
        self.db.execute("UPDATE conversations SET updated=? WHERE id=?", (now, cid))
        self.db.commit()
        return cur.lastrowid

    def update_message(self, mid: int, content: str, thinking: str = "", stats: dict | None = None,
                       origins: list | None = None) -> None:
        self.db.execute("UPDATE messages SET content=?, thinking=?, stats=?, origins=? WHERE id=?",
                        (content, thinking, json.dumps(stats) if stats is not None else None,
                         json.dumps(origins) if origins is not None else None, mid))
        self.db.commit()

    def delete_messages_from(self, cid: int, mid: int) -> None:
        """Delete message `mid` and everything after it (edit / regenerate)."""
        self.db.execute("DELETE FROM messages WHERE conversation_id=? AND id>=?", (cid, mid))
        self.db.commit()

    # export
    def export_markdown(self, cid: int) -> str:
        c = self.conversation(cid)
        out = [f"# {c.title}\n"]
        for m in self.messages(cid):
            who = {"user": "You", "assistant": "Gemma", "system": "System"}.get(m.role, m.role)
            out.append(f"**{who}:**\n\n{_closed_fences(m.content)}\n")
            if m.stats and m.stats.get("footer"):
                out.append(f"*{m.stats['footer']}*\n")
        return "\n".join(out)

    def export_json(self, cid: int, models: dict | None = None, app_settings: dict | None = None) -> str:
        c = self.conversation(cid)
        return json.dumps({
            "title": c.title, "settings": c.settings, "models": models or {}, "generation": app_settings or {},
            "messages": [{"role": m.role, "content": m.content, "thinking": m.thinking, "stats": m.stats}
                         for m in self.messages(cid)],
        }, indent=2, ensure_ascii=False)
