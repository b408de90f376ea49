"""The loaded model: what the chat session asks the engine thread to load (a local pair, or a
server to connect to), what is loaded, and what a failed switch falls back to — the model that
was there when it is still loaded, else the one that worked before."""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from app.core.chat_types import LoadRequest, ModelInfo
from app.core.settings import Settings, load_options


def picker_key(req: LoadRequest) -> str:
    return req.target or f"remote:{req.connection}:{req.model}"


class ModelLoader(QObject):
    load = Signal(object)  # LoadRequest, to the engine thread (queued)
    about_to_load = Signal()  # what runs must stop first (connected directly: it runs before the request)
    loading = Signal(str, str)  # picker key, "loading…" | "connecting…"
    model_changed = Signal()  # info changed (loaded, loading, or none)
    ready = Signal()  # a model is loaded (anew, or still): the chat's context is counted again
    load_failed = Signal(str)  # what went wrong, in the engine's words
    status = Signal(str, int)

    def __init__(self, settings: Settings, parent=None):
        super().__init__(parent)
        self.settings = settings
        self.info: ModelInfo | None = None  # None while loading
        self.closing = False
        self._last_load: LoadRequest | None = None  # what is loaded, to load again after a failed switch
        self._loaded_info: ModelInfo | None = None  # its ModelInfo
        self._pending_load: LoadRequest | None = None

    @property
    def loading_model(self) -> bool:
        return self._pending_load is not None

    def load_local(self, target: str, drafter: str = "", mmproj: str | None = None) -> None:
        self.begin(LoadRequest(target=target, drafter=drafter, mmproj=mmproj, options=load_options(self.settings)),
                   "loading…")

    def load_remote(self, req: LoadRequest) -> None:
        self.begin(req, "connecting…")

    def begin(self, req: LoadRequest, words: str) -> None:
        self.about_to_load.emit()
        self._pending_load = req
        self.info = None
        self.loading.emit(picker_key(req), words)
        self.model_changed.emit()
        self.status.emit("Connecting…" if req.remote else "Loading model…", 0)
        self.load.emit(req)

    def on_loaded(self, info: ModelInfo) -> None:
        self.info = self._loaded_info = info
        self._last_load, self._pending_load = self._pending_load, None
        s = self.settings
        if info.remote:
            s["remote"] = {"connection": info.remote.connection, "model": info.remote.model}
        else:
            s["target"], s["drafter"], s["remote"] = info.target, info.drafter, None
        s.save()
        where = f" on {info.engine} at {info.remote.server}" if info.remote else ""
        ctx = f"context {info.n_ctx} tokens" if info.n_ctx else "context set by the server"
        self.status.emit(f"Loaded {info.target_name}{where} ({ctx})", 5000)
        self.model_changed.emit()
        self.ready.emit()

    def on_load_failed(self, message: str, still_loaded: bool) -> None:
        failed, self._pending_load = self._pending_load, None
        if still_loaded and self._loaded_info is not None:  # refused before unloading: the old one is there
            self.info = self._loaded_info
            self.model_changed.emit()
            self.ready.emit()
        elif self._last_load is not None and failed != self._last_load and not self.closing:
            previous = self._last_load  # the switch failed half-way: back to what worked
            self._last_load = self._loaded_info = None
            self.begin(previous, "loading…")
        else:
            self.info = self._loaded_info = None
            self.model_changed.emit()
        self.status.emit("Loading failed", 5000)
        if not self.closing:
            self.load_failed.emit(message)
