"""The models this user has: downloaded or imported pairs, in a JSON file under the
platformdirs user data folder (the files themselves stay in the Hugging Face cache or
wherever the user keeps them). `details` reads each pair's headers for the Models page:
quantization, size, whether it fits this machine, what is wrong with it."""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from ..errors import TandemError
from .hardware import Machine
from .pairing import pair_info


@dataclass
class LocalModel:
    name: str
    target: str
    drafter: str | None
    source: str  # "download" or "import"
    added: float = 0.0
    last_used: float = 0.0
    projector: str | None = None  # the vision/audio projector (mmproj) next to the target, if any


@dataclass
class PairDetails:
    """One library entry as the Models page shows it."""

    entry: LocalModel
    quant: str = ""
    size: int = 0  # bytes on disk: target + drafter + projector
    fit: str = ""  # "fits", "tight" or "too big" for this machine's memory
    problem: str | None = None  # missing or mismatched files


OVERHEAD_BYTES = 1_500_000_000  # KV cache and buffers of a default-size context, roughly


def data_dir() -> Path:
    """Tandem's per-user data folder ($TANDEM_DATA_DIR, else where platformdirs says)."""
    from platformdirs import user_data_dir

    return Path(os.environ.get("TANDEM_DATA_DIR") or user_data_dir("Tandem", appauthor=False))


def default_path() -> Path:
    return data_dir() / "models.json"


class Library:
    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path else default_path()

    def entries(self) -> list[LocalModel]:
        try:
            data = json.loads(self.path.read_text("utf-8"))
            known = {f.name for f in fields(LocalModel)}
            return [LocalModel(**{k: v for k, v in e.items() if k in known}) for e in data.get("models", [])]
        except (OSError, ValueError, TypeError, AttributeError):
            return []

    def find(self, target: str | Path) -> LocalModel | None:
        t = str(Path(target).resolve())
        return next((e for e in self.entries() if e.target == t), None)

    def _save(self, entries: list[LocalModel]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"models": [asdict(e) for e in entries]}, indent=2), "utf-8")
        os.replace(tmp, self.path)

    def add(self, name: str, target: str | Path, drafter: str | Path | None, source: str,
            projector: str | Path | None = None) -> LocalModel:
        """List a pair (again); its projector is the one given, else the mmproj next to the
        target as named (in the Hugging Face cache the resolved file is a blob elsewhere)."""
        from .pairing import find_projector

        entry = LocalModel(name, str(Path(target).resolve()), str(Path(drafter).resolve()) if drafter else None,
                           source, time.time())
        projector = projector or find_projector(target)
        entry.projector = str(Path(projector).absolute()) if projector else None  # keeps its name
        old = self.find(entry.target)
        if old is not None:  # the same files again: keep when they were added and last used
            entry.added, entry.last_used, entry.source = old.added, old.last_used, old.source
        rest = [e for e in self.entries() if e.target != entry.target]
        self._save(rest + [entry])
        return entry

    def touch(self, target: str | Path) -> None:
        """Record that a pair was just loaded (the Models page sorts by it)."""
        entries = self.entries()
        t = str(Path(target).resolve())
        for e in entries:
            if e.target == t:
                e.last_used = time.time()
                self._save(entries)
                return

    def remove(self, target: str | Path, delete_files: bool = False) -> list[Path]:
        """Take a pair off the list; with delete_files, also delete the files of a pair Tandem
        downloaded (never an imported one: those are the user's own). Returns what was deleted."""
        entry = self.find(target)
        if entry is None:
            return []
        self._save([e for e in self.entries() if e.target != entry.target])
        deleted = []
        if delete_files and entry.source == "download":
            for f in (entry.target, entry.drafter, entry.projector):
                if not f:
                    continue
                link = Path(f)
                real = link.resolve()  # in the Hugging Face cache the snapshot file links to a blob
                for p in dict.fromkeys((real, link)):
                    if p.suffix == ".gguf" or p.parent.name == "blobs":
                        try:
                            p.unlink()
                            deleted.append(p)
                        except FileNotFoundError:
                            pass
        return deleted

    def details(self, machine: Machine | None = None) -> list[PairDetails]:
        """Every entry, most recently used first, with what its headers say."""
        out = []
        for e in sorted(self.entries(), key=lambda e: (e.last_used, e.added), reverse=True):
            d = PairDetails(e)
            try:
                t, dr = pair_info(e.target, e.drafter)
                d.quant = t.quant
                d.size = t.file_size + (dr.file_size if dr else 0)
                if e.projector and Path(e.projector).is_file():
                    d.size += Path(e.projector).stat().st_size
            except TandemError as err:
                d.problem = str(err)
            if machine is not None and d.size:
                need = d.size + OVERHEAD_BYTES
                d.fit = "fits" if need <= machine.budget * 0.85 else "tight" if need <= machine.budget else "too big"
            out.append(d)
        return out

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
