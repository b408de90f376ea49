"""One test process at a time for work that fills a cache on disk (a download, a build, a file
assembled in place): under `pytest -n` every worker runs the session fixtures, and two workers
writing the same cached file would each see the other's half-written copy."""

from __future__ import annotations

from pathlib import Path

from filelock import FileLock


def once(name: str) -> FileLock:
    """A lock shared by every test process on this machine, named for the cache it guards:
    `with once("gemma3"): ...` — the first worker fills the cache, the next finds it filled."""
    where = Path.home() / ".cache" / "tandem" / "locks"
    where.mkdir(parents=True, exist_ok=True)
    return FileLock(where / f"{name}.lock", timeout=3600)
