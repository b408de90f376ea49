"""The models this user has: downloaded or imported pairs, in a JSON file under the
platformdirs user data folder (the files themselves stay in the Hugging Face cache or
wherever the user keeps them)."""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import TandemError
from .pairing import pair_info


@dataclass
class LocalModel:
    name: str
    target: str
    drafter: str | None
    source: str  # "download" or "import"
    added: float = 0.0


def default_path() -> Path:
    from platformdirs import user_data_dir

    return Path(os.environ.get("TANDEM_DATA_DIR") or user_data_dir("Tandem", appauthor=False)) / "models.json"


class Library:
    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path else default_path()

    def entries(self) -> list[LocalModel]:
        try:
            data = json.loads(self.path.read_text("utf-8"))
            return [LocalModel(**e) for e in data.get("models", [])]
        except (OSError, ValueError, TypeError):
            return []

    def _save(self, entries: list[LocalModel]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"models": [asdict(e) for e in entries]}, indent=2), "utf-8")
        os.replace(tmp, self.path)

    def add(self, name: str, target: str | Path, drafter: str | Path | None, source: str) -> LocalModel:
        entry = LocalModel(name, str(Path(target).resolve()), str(Path(drafter).resolve()) if drafter else None,
                           source, time.time())
        rest = [e for e in self.entries() if e.target != entry.target]
        self._save(rest + [entry])
        return entry

    def verify(self) -> list[tuple[LocalModel, str | None]]:
        """Each entry with None if its files are present and pair, else the problem."""
        out = []
        for e in self.entries():
            try:
                pair_info(e.target, e.drafter)
                out.append((e, None))
            except TandemError as err:
                out.append((e, str(err)))
        return out
