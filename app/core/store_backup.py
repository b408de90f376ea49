"""The chat database's safety net: a daily copy made with SQLite's online backup API (the
newest few kept next to the database), and, when the database is damaged, the file moved
aside, the newest sound backup restored and every row still readable in the damaged file added
back. No Qt here."""

from __future__ import annotations

import os
import shutil
import sqlite3
import time
from pathlib import Path

BACKUP_INTERVAL_S = 24 * 3600  # a backup a day while the app is used
BACKUPS_KEPT = 3


def backups(backup_dir: Path) -> list[Path]:
    """The daily backups kept, oldest first."""
    return sorted(backup_dir.glob("conversations-*.sqlite3")) if backup_dir.is_dir() else []


def newest_backup(backup_dir: Path) -> Path | None:
    """The newest backup that passes SQLite's quick check."""
    for b in reversed(backups(backup_dir)):
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


def backup_if_due(db: sqlite3.Connection, backup_dir: Path, now: float | None = None) -> Path | None:
    """A consistent copy with SQLite's online backup API, at most once per interval; the
    newest BACKUPS_KEPT are kept."""
    now = time.time() if now is None else now
    kept = backups(backup_dir)
    if kept and now - kept[-1].stat().st_mtime < BACKUP_INTERVAL_S:
        return None
    backup_dir.mkdir(parents=True, exist_ok=True)
    dest = backup_dir / f"conversations-{time.strftime('%Y%m%d-%H%M%S', time.localtime(now))}.sqlite3"
    try:
        target = sqlite3.connect(str(dest))
        try:
            db.backup(target)
        finally:
            target.close()
    except sqlite3.Error:
        dest.unlink(missing_ok=True)
        return None
    for old in backups(backup_dir)[:-BACKUPS_KEPT]:
        old.unlink(missing_ok=True)
    return dest


def replace_damaged(path: Path, backup_dir: Path) -> tuple[Path, Path | None]:
    """Move the damaged database (and SQLite's side files) aside and copy the newest sound
    backup in its place: (where the damaged file went, the backup used or None)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    damaged = path.with_name(f"{path.name}.damaged-{stamp}")
    os.replace(path, damaged)
    for suffix in ("-wal", "-shm"):  # SQLite's side files belong to the damaged copy
        side = path.with_name(path.name + suffix)
        if side.exists():
            os.replace(side, damaged.with_name(damaged.name + suffix))
    backup = newest_backup(backup_dir)
    if backup is not None:
        shutil.copyfile(backup, path)
    return damaged, backup


def recovery_note(error: Exception, damaged: Path, backup: Path | None, chats: int, salvaged: int) -> str:
    """What the user is told, in one message."""
    source = f"the backup of {time.strftime('%Y-%m-%d %H:%M', time.localtime(backup.stat().st_mtime))}" \
        if backup else "no backup"
    return (f"The chat history file was damaged ({error}). It was kept as {damaged}. "
            f"Restored {chats} chats from {source}"
            + (f" and {salvaged} messages still readable in the damaged file." if salvaged else "."))


def salvage(db: sqlite3.Connection, damaged: Path) -> int:
    """Copy every row still readable in the damaged file that the restored database
    lacks; reading stops at the first damaged page of each table."""
    added = 0
    try:
        old = sqlite3.connect(f"file:{damaged}?mode=ro", uri=True)
    except sqlite3.Error:
        return 0
    try:
        for table, wanted in (("conversations", "id, title, created, updated, settings, leaf_id"),
                              ("messages", "id, conversation_id, role, content, thinking, stats, origins, "
                                           "created, parent_id, media, tool")):
            try:  # the columns the damaged file has (it may be from an older version)
                have = {r[1] for r in old.execute(f"PRAGMA table_info({table})")}
                cols = ", ".join(c for c in wanted.split(", ") if c in have)
            except sqlite3.Error:
                continue
            try:
                for row in old.execute(f"SELECT {cols} FROM {table} ORDER BY id"):
                    try:
                        cur = db.execute(f"INSERT OR IGNORE INTO {table}({cols}) VALUES "
                                         f"({','.join('?' * len(row))})", row)
                        added += cur.rowcount if table == "messages" else 0
                    except sqlite3.Error:  # e.g. a message whose chat was lost
                        continue
            except sqlite3.Error:
                continue
        db.commit()
    finally:
        old.close()
    return added
