"""Downloading a Gemma 4 pair from the Hugging Face Hub with huggingface_hub.

File names are resolved from each repository's file list; progress (bytes, speed, time
left) is reported through a callback; a download can be cancelled from another thread and
resumes from its partial file later; free disk space is checked before starting and the
size and SHA-256 are verified afterwards. HF_HUB_OFFLINE is honoured."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from ..errors import TandemError
from .catalog import REPO_RE, CatalogModel, Source, model_for_repo
from .centroids import with_clusters
from .gguf_info import TARGET_ARCH, check_drafter, check_target, read_gguf_info
from .hub_errors import DownloadError, hub_error
from .repo_files import base, drafter_files, is_projector, is_qat, pick_target, precision_rank

DISK_MARGIN = 512 * 2**20  # keep this much free after a download
COMMIT_RE = re.compile(r"[0-9a-f]{40}")
ETAG_RE = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # git blob sha1 or LFS sha256: a blob's file name
PROBE_TIMEOUT_S = 10.0


class DownloadCancelled(DownloadError):
    pass


class HubUnreachable(DownloadError):
    """Offline, or the Hub does not answer: no other source will answer either."""


@dataclass(frozen=True)
class RemoteFile:
    repo: str
    path: str
    size: int
    sha256: str | None


@dataclass
class Plan:
    target: RemoteFile
    drafters: list  # RemoteFile candidates, best first
    notes: list  # what was tried and did not work, for the user
    projector: RemoteFile | None = None  # the vision/audio projector (mmproj) from the target's repository
    assistant: str = ""  # the drafter's published checkpoint, where its cluster centroids are (or "")


@dataclass
class PairDownload:
    target: Path
    drafter: Path | None  # None: no drafter pairs with this target; `notes` says why
    notes: list
    projector: Path | None = None  # pictures (and audio on E2B/E4B); None: none, or not wanted


@dataclass
class Progress:
    label: str  # "target" or "drafter"
    filename: str
    done: int
    total: int
    speed: float  # bytes/s, smoothed
    eta_s: float | None

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 0.0


def offline_mode() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def safe_repo_path(path) -> str:
    """A file name from a Hub listing, checked before it is used as a path on disk: relative,
    no `..` or empty parts, no backslashes, drive letters or control characters."""
    if (not isinstance(path, str) or not path or len(path) > 1024 or path.startswith("/")
            or any(c in path for c in "\\:") or any(ord(c) < 32 or ord(c) == 127 for c in path)
            or any(part in ("", ".", "..") or len(part) > 255 for part in path.split("/"))):
        raise DownloadError(f"the Hub listed an unsafe file name {str(path)[:80]!r}; refusing to download")
    return path


def _inside(path: Path, root: Path) -> Path:
    """`path` if it stays inside `root` once links and `..` are resolved; else refuse."""
    real, top = path.resolve(), root.resolve()
    if real != top and top not in real.parents:
        raise DownloadError(f"refusing to write {path} outside {root}")
    return path


class Downloader:
    def __init__(self, endpoint: str | None = None, token: str | None = None, folder: str | Path | None = None,
                 cache_dir: str | Path | None = None):
        self.endpoint = endpoint
        self.token = token
        self.folder = Path(folder) if folder else None  # None = the Hugging Face cache
        self.cache_dir = str(cache_dir) if cache_dir else None
        self._cancel = threading.Event()
        self._probed = False

    def cancel(self) -> None:
        self._cancel.set()

    # ---- resolving names -------------------------------------------------------------
    def list_files(self, repo: str) -> list[RemoteFile]:
        from huggingface_hub import HfApi

        if offline_mode():
            raise HubUnreachable("offline: HF_HUB_OFFLINE is set, so the Hub's file list cannot be read")
        if not self._probed:
            self._probe()
            self._probed = True
        try:
            api = HfApi(endpoint=self.endpoint, token=self.token)
            out = []
            for f in api.list_repo_tree(repo, recursive=True):
                if getattr(f, "size", None) is None:
                    continue  # a folder
                sha = f.lfs.sha256 if getattr(f, "lfs", None) else None
                out.append(RemoteFile(repo, f.path, int(f.size), sha))
        except Exception as e:
            raise hub_error(e, repo) from None
        # The listing comes from outside: a name with `..` or an absolute path would write
        # outside the download folder, and a hub that sends one is not to be trusted at all.
        for f in out:
            safe_repo_path(f.path)
            if f.size < 0 or (f.sha256 is not None and not re.fullmatch(r"[0-9a-f]{64}", str(f.sha256))):
                raise DownloadError(f"the Hub listed {f.path} with an invalid size or checksum; refusing")
        return out

    def _probe(self) -> None:
        """One request without retries, so that an unreachable Hub is reported at once:
        huggingface_hub's listing retries five times with back-off (24 s of waiting)."""
        from huggingface_hub import constants, get_session

        url = (self.endpoint or constants.ENDPOINT).rstrip("/") + "/api/models"
        try:
            get_session().head(url, timeout=PROBE_TIMEOUT_S)
        except Exception as e:
            raise HubUnreachable(f"cannot reach the Hub at {url.rsplit('/api', 1)[0]} ({type(e).__name__}); "
                                "check the connection, or set HF_HUB_OFFLINE=1 to use downloaded "
                                "files only") from None

    def plan(self, model: CatalogModel, quant: str) -> Plan:
        """The target for `quant` from the first source that has one, and every drafter
        candidate of every source, best first (see Plan)."""
        if quant not in model.quants:
            raise DownloadError(f"{model.title} has no {quant} build here; choose one of {', '.join(model.quants)}")
        return self._plan(list(model.sources), quant, model.title, False, model.assistant)

    def plan_repo(self, repo: str, quant: str) -> tuple[Plan, CatalogModel | None]:
        """Like llama.cpp's `-hf repo:quant`: the target from that repository, its drafter from
        the same repository first (then, for a repository of the catalog, the model's other
        sources)."""
        if not REPO_RE.fullmatch(repo):
            raise DownloadError(f"{repo!r} is not a repository name (owner/name)")
        model = model_for_repo(repo)
        own = Source(repo, qat=is_qat(repo))
        others = [s for s in model.sources if s.repo.lower() != repo.lower()] if model else []
        return self._plan([own] + others, quant, repo, True, model.assistant if model else ""), model

    def _plan(self, sources: list[Source], quant: str, title: str, own_repo_only: bool, assistant: str) -> Plan:
        notes: list[str] = []
        listings: dict[str, list[RemoteFile] | None] = {}

        def listing(src: Source) -> list[RemoteFile] | None:
            if src.repo not in listings:
                try:
                    listings[src.repo] = self.list_files(src.repo)
                except HubUnreachable:
                    raise
                except DownloadError as e:  # not found, gated, ...: the next source may do
                    notes.append(str(e))
                    listings[src.repo] = None
            return listings[src.repo]

        target = target_src = None
        for src in sources[:1] if own_repo_only else [s for s in sources if not s.drafter_only]:
            files = listing(src)
            target = pick_target(files, quant) if files is not None else None
            if target is not None:
                target_src = src
                break
            if files is not None:
                notes.append(f"{src.repo} has no single-file {quant} model")
        if target is None:
            raise DownloadError(f"no {quant} file for {title} found" + (": " + "; ".join(notes) if notes else ""))
        qat = target_src.qat or is_qat(target.path)
        ranked = []
        order = [target_src] + [s for s in sources if s is not target_src]
        for i, src in enumerate(order):
            files = listing(src)
            for f in drafter_files(files or [], src.drafter_only):
                # a QAT drafter for a QAT target (and the reverse), then the target's own
                # repository, then the precision closest to Q8_0
                mismatch = (src.qat or is_qat(f.path)) != qat
                ranked.append(((mismatch, i, precision_rank(f.path), len(f.path), f.path), f))
        projectors = [f for f in listing(target_src) or [] if is_projector(f.path) and base(f.path).endswith(".gguf")]
        projector = min(projectors, key=lambda f: (precision_rank(f.path), len(f.path), f.path)) if projectors else None
        return Plan(target, [f for _, f in sorted(ranked, key=lambda x: x[0])], notes, projector, assistant)

    # ---- downloading -----------------------------------------------------------------
    def check_space(self, files: list[RemoteFile]) -> None:
        where = self.folder or Path(self.cache_dir or _hf_cache())
        probe = where
        while not probe.exists():
            probe = probe.parent
        free = shutil.disk_usage(probe).free
        need = sum(f.size for f in files) + DISK_MARGIN
        if need > free:
            raise DownloadError(f"not enough disk space in {where}: need {need / 1e9:.2f} GB, "
                                f"{free / 1e9:.2f} GB free")

    def download(self, f: RemoteFile, label: str, on_progress: Callable[[Progress], None] | None = None) -> Path:
        """Fetch one file with huggingface_hub's HTTP client, into a `.part` file that survives a
        cancel, a dropped connection or a restart and is resumed with a ranged request.
        (hf_hub_download deletes its partial file on any failure, so it cannot resume across
        attempts.) The finished file goes into the Hugging Face cache layout, or the folder
        the user chose."""
        from huggingface_hub import constants, get_hf_file_metadata, hf_hub_download, hf_hub_url
        from huggingface_hub.file_download import http_get
        from huggingface_hub.utils import build_hf_headers

        safe_repo_path(f.path)
        if offline_mode():
            try:
                if self.folder:
                    local = self.folder / f.path
                    if local.exists():
                        return local
                    raise FileNotFoundError(local)
                return Path(hf_hub_download(f.repo, f.path, cache_dir=self.cache_dir, local_files_only=True))
            except Exception:
                raise DownloadError(f"offline (HF_HUB_OFFLINE is set) and {f.path} is not downloaded yet") from None
        # 1 MiB reads (the library's default is 10 MiB) keep progress and cancel responsive
        constants.DOWNLOAD_CHUNK_SIZE = min(constants.DOWNLOAD_CHUNK_SIZE, 2**20)
        try:
            meta = get_hf_file_metadata(hf_hub_url(f.repo, f.path, endpoint=self.endpoint), token=self.token,
                                        endpoint=self.endpoint)
        except Exception as e:
            raise hub_error(e, f.repo) from None
        size = meta.size if meta.size is not None else f.size
        final, blob = self._destination(f, meta)
        if final.exists() and final.stat().st_size == size:
            return final
        part = blob.with_name(blob.name + ".part")
        part.parent.mkdir(parents=True, exist_ok=True)
        resume = part.stat().st_size if part.exists() else 0
        if resume > size:
            part.unlink()
            resume = 0
        tqdm_class = _progress_tqdm(label, replace(f, size=size), on_progress, self._cancel)
        try:
            with open(part, "ab") as fh:
                if resume < size:
                    http_get(meta.location, fh, resume_size=resume, headers=build_hf_headers(token=self.token),
                             expected_size=size, tqdm_class=tqdm_class)
        except DownloadCancelled:
            raise
        except Exception as e:
            if self._cancel.is_set():
                raise DownloadCancelled("download cancelled; it resumes where it stopped next time") from None
            raise hub_error(e, f.repo) from None
        self.verify(part, replace(f, size=size))
        os.replace(part, blob)
        if final != blob:
            self._link_into_cache(f, meta, blob, final)
        return final

    def _destination(self, f: RemoteFile, meta) -> tuple[Path, Path]:
        """(the path the user gets, where the bytes are stored)."""
        path = safe_repo_path(f.path)
        if self.folder:
            p = _inside(self.folder / path, self.folder)
            return p, p
        from huggingface_hub.file_download import repo_folder_name

        repo_dir = Path(self.cache_dir or _hf_cache()) / repo_folder_name(repo_id=f.repo, repo_type="model")
        etag = (meta.etag or f.sha256 or "").strip('"').lower()
        commit = (meta.commit_hash or "").lower()
        # Both become names on disk: only plain hashes are accepted.
        if not ETAG_RE.fullmatch(etag):
            raise DownloadError(f"the Hub sent an invalid etag for {f.path}; refusing to download")
        if not COMMIT_RE.fullmatch(commit):
            raise DownloadError(f"the Hub sent an invalid commit id for {f.path}; refusing to download")
        return (_inside(repo_dir / "snapshots" / commit / path, repo_dir),
                _inside(repo_dir / "blobs" / etag, repo_dir))

    @staticmethod
    def _link_into_cache(f: RemoteFile, meta, blob: Path, pointer: Path) -> None:
        """The Hugging Face cache layout: snapshots/<commit>/<file> -> blobs/<etag>, refs/main."""
        pointer.parent.mkdir(parents=True, exist_ok=True)
        pointer.unlink(missing_ok=True)
        try:
            pointer.symlink_to(os.path.relpath(blob, pointer.parent))
        except OSError:  # no symlinks (Windows without developer mode): keep the bytes there
            os.replace(blob, pointer)
        refs = blob.parent.parent / "refs"
        refs.mkdir(exist_ok=True)
        (refs / "main").write_text(meta.commit_hash.lower())

    def verify(self, path: Path, f: RemoteFile) -> None:
        size = path.stat().st_size
        if size != f.size:
            raise DownloadError(f"{f.path}: size {size:,} bytes, expected {f.size:,}")
        if f.sha256:
            h = hashlib.sha256()
            with open(path, "rb") as fh:
                for block in iter(lambda: fh.read(8 * 2**20), b""):
                    h.update(block)
            if h.hexdigest() != f.sha256:
                bad = path.resolve()
                path.unlink(missing_ok=True)
                if bad != path:
                    bad.unlink(missing_ok=True)  # the blob behind the cache's symlink
                raise DownloadError(f"{f.path}: checksum mismatch (the file was damaged in transit and "
                                    "has been deleted; download it again)")

    def download_pair(self, model: CatalogModel, quant: str,
                      on_progress: Callable[[Progress], None] | None = None) -> PairDownload:
        return self.download_plan(self.plan(model, quant), on_progress)

    def download_plan(self, plan: Plan, on_progress: Callable[[Progress], None] | None = None,
                      vision: bool = True) -> PairDownload:
        """The target, then drafter candidates in order until one pairs with it by its GGUF
        header; a refused drafter is deleted and the reason kept. Without any, the target
        comes alone and the notes say why MTP is off. With `vision`, the projector (mmproj)
        comes too, checked against the target the same way."""
        self._cancel.clear()  # once per pair: a Cancel between the two files must hold
        notes = list(plan.notes)
        projector = plan.projector if vision else None
        self.check_space([plan.target] + plan.drafters[:1] + ([projector] if projector else []))
        t = self.download(plan.target, "target", on_progress)
        ti = read_gguf_info(t)
        if ti.arch != TARGET_ARCH:
            raise DownloadError(f"{t.name} is a '{ti.arch}' model, not Gemma 4 ('{TARGET_ARCH}')")
        check_target(ti)
        drafter = None
        for cand in plan.drafters:
            d = self.download(cand, "drafter", on_progress)
            try:
                check_drafter(ti, read_gguf_info(d))
            except TandemError as e:
                notes.append(f"{cand.repo}/{cand.path} is not usable: {e}")
                _delete(d)
                continue
            drafter = with_clusters(d, plan.assistant, notes, self.endpoint, self.token, self.cache_dir,
                                    offline_mode()) if plan.assistant else d
            break
        if drafter is None:
            notes.append("no usable MTP drafter was found " + (
                "(every candidate was refused)" if plan.drafters else "in any source") +
                ", so MTP is off for this model: it runs at plain decoding speed")
        return PairDownload(t, drafter, notes, self._download_projector(projector, ti, notes, on_progress))

    def _download_projector(self, f: RemoteFile | None, ti, notes: list, on_progress) -> Path | None:
        if f is None:
            return None
        from ..local.media import read_projector_info

        p = self.download(f, "projector", on_progress)
        try:
            info = read_projector_info(p)
            wrong = [m for m, dim in info.n_embd_out.items() if dim != ti.n_embd]
            if wrong:
                raise TandemError(f"it writes {wrong[0]} embeddings for another model width")
        except TandemError as e:
            notes.append(f"{f.repo}/{f.path} is not usable for pictures: {e}")
            _delete(p)
            return None
        return p


def _delete(path: Path) -> None:
    """A downloaded file and, in the Hugging Face cache, the blob its link points to."""
    real = path.resolve()
    path.unlink(missing_ok=True)
    if real != path:
        real.unlink(missing_ok=True)


def _hf_cache() -> str:
    from huggingface_hub import constants

    return constants.HF_HUB_CACHE


def _progress_tqdm(label: str, f: RemoteFile, on_progress, cancel: threading.Event):
    """A tqdm stand-in handed to huggingface_hub: reports progress and aborts on cancel."""
    from tqdm.auto import tqdm as base

    class ProgressBar(base):
        def __init__(self, *a, **k):
            k["disable"] = True  # no terminal output of its own
            super().__init__(*a, **k)
            self._t0 = time.monotonic()
            self._last = (self._t0, 0)
            self._speed = 0.0
            self._done = int(k.get("initial") or 0)

        def update(self, n=1):
            if cancel.is_set():
                raise DownloadCancelled("download cancelled; it resumes where it stopped next time")
            self._done += int(n or 0)
            now = time.monotonic()
            t_last, d_last = self._last
            if now - t_last >= 0.25 or self._done >= f.size:
                inst = (self._done - d_last) / max(now - t_last, 1e-6)
                self._speed = inst if self._speed == 0 else 0.7 * self._speed + 0.3 * inst
                self._last = (now, self._done)
                eta = (f.size - self._done) / self._speed if self._speed > 0 else None
                if on_progress:
                    on_progress(Progress(label, f.path, self._done, f.size, self._speed, eta))
            return super().update(n)

    return ProgressBar
