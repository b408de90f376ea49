"""User settings: one JSON file under the platformdirs user config folder.

Every key is declared once in `FIELDS` with its type and default. Reading keeps what a newer or
older Tandem wrote (keys this version does not know survive a save); a value of the wrong type
falls back to its default; an unreadable file is kept aside and reported (`recovered`), never
silently overwritten.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from engine.generation import AUTO, MAX_DRAFT
from engine.local.options import LoadOptions
from engine.models.draft_head import HEADS
from engine.sampling import SamplingParams

SAMPLING = SamplingParams()  # the sampling defaults: the engine's, in one place
LOAD = LoadOptions()  # and how a pair loads
SAMPLING_KEYS = ("temperature", "top_k", "top_p", "min_p", "repeat_penalty")  # the ones Settings shows


@dataclass(frozen=True)
class Field:
    default: Any
    check: Callable[[Any], bool]  # is a value read from the file usable as it is?


def _of(*types) -> Callable[[Any], bool]:
    # bool is an int in Python: a JSON true must not pass as a number, nor 1 as a switch
    return lambda v: isinstance(v, types) and (bool in types or not isinstance(v, bool))


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _draft_max(v) -> bool:
    return v == AUTO or (_of(int)(v) and 1 <= v <= MAX_DRAFT)


def _count_or_auto(v) -> bool:
    return v == AUTO or _of(int)(v)


def _optional_dict(v) -> bool:
    return v is None or isinstance(v, dict)


def _list_of_dicts(v) -> bool:
    return isinstance(v, list) and all(isinstance(x, dict) for x in v)


FIELDS: dict[str, Field] = {
    "target": Field("", _of(str)),  # the local pair last loaded
    "drafter": Field("", _of(str)),
    "remote": Field(None, _optional_dict),  # {"connection", "model"}: a server model last used, else None
    "connections": Field([], _list_of_dicts),  # servers (app.connections.Connection as dicts; keys in the keyring)
    "mcp_servers": Field([], _list_of_dicts),  # Settings → Tools (app.tools.mcp_client.ServerConfig dicts), all off by default
    # "auto" (the default): chosen from the memory plan at each load (engine/models/fit.py)
    "target_gpu_layers": Field(LOAD.target_gpu_layers, _count_or_auto),
    "drafter_gpu_layers": Field(LOAD.drafter_gpu_layers, _count_or_auto),
    "n_ctx": Field(AUTO, _count_or_auto),
    "draft_head": Field(LOAD.draft_head, lambda v: v in HEADS),  # the drafter's head (engine/models/draft_head.py)
    "threads": Field(LOAD.n_threads, _of(int)),
    "temperature": Field(SAMPLING.temperature, _number),
    "top_k": Field(SAMPLING.top_k, _of(int)),
    "top_p": Field(SAMPLING.top_p, _number),
    "min_p": Field(SAMPLING.min_p, _number),
    "repeat_penalty": Field(SAMPLING.repeat_penalty, _number),
    "max_tokens": Field(1024, _of(int)),
    "system_prompt": Field("", _of(str)),
    "theme": Field("system", lambda v: v in ("system", "light", "dark")),
    "use_mtp": Field(True, _of(bool)),  # drafting on in new chats (ChatOptions.drafting); the name files hold
    "draft_max": Field(AUTO, _draft_max),  # for new chats: "auto" or a fixed draft length
    "font_scale": Field(1.0, lambda v: _number(v) and 0.5 <= v <= 3.0),  # Ctrl+plus / Ctrl+minus / Ctrl+0
    "geometry": Field("", _of(str)),  # the window's size and place (Qt's saveGeometry, base64)
    "show_charts": Field(True, _of(bool)),  # View → Speed charts
    "serve_port": Field(8080, lambda v: _of(int)(v) and 1024 <= v <= 65535),  # File → Local API server
    "tool_timeout_s": Field(60, lambda v: _of(int)(v) and 1 <= v <= 3600),  # an allowed tool call's time limit
}


def sampling_params(settings: dict) -> SamplingParams:
    """The sampling the settings ask for (the rest of SamplingParams: its defaults)."""
    return SamplingParams(**{k: settings[k] for k in SAMPLING_KEYS})


def load_options(settings: dict) -> LoadOptions:
    """How the settings load a local pair (the rest of LoadOptions: its defaults). The window
    keeps its chats' caches on disk, so a long chat is not read again after a restart."""
    return LoadOptions(n_ctx=settings["n_ctx"], n_threads=settings["threads"],
                       target_gpu_layers=settings["target_gpu_layers"],
                       drafter_gpu_layers=settings["drafter_gpu_layers"], draft_head=settings["draft_head"],
                       cache_disk_mib=-1)


def default_config_path() -> Path:
    from platformdirs import user_config_dir

    return Path(user_config_dir("Tandem", appauthor=False)) / "settings.json"


def _fresh(value):
    return json.loads(json.dumps(value))  # a default list or dict is never shared between instances


class Settings(dict):
    """The settings as a dict of the declared keys (assigning an undeclared key is a bug: KeyError)."""

    def __init__(self, path: str | Path | None = None):
        super().__init__({k: _fresh(f.default) for k, f in FIELDS.items()})
        self.path = Path(path) if path else default_config_path()
        self.unknown: dict = {}  # keys of another Tandem version, written back as they were
        self.recovered = ""  # what happened to an unreadable file, for the window to say
        try:
            raw = self.path.read_bytes()
        except OSError:
            return  # first run
        try:
            data = json.loads(raw.decode("utf-8"))
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
        except ValueError as e:
            aside = self.path.with_name(f"{self.path.stem}.unreadable-{time.strftime('%Y%m%d-%H%M%S')}.json")
            try:
                os.replace(self.path, aside)
                where = f"it was kept as {aside}"
            except OSError:
                where = "it could not be moved aside"
            self.recovered = (f"The settings file {self.path} could not be read ({e}); {where}. "
                              "Tandem started with the default settings.")
            return
        for k, v in data.items():
            if k not in FIELDS:
                self.unknown[k] = v
            elif FIELDS[k].check(v):
                super().__setitem__(k, float(v) if isinstance(FIELDS[k].default, float) else v)
            elif k == "draft_max" and v == 0:  # written by Tandem 0.1 for auto
                super().__setitem__(k, AUTO)

    def __setitem__(self, key, value):
        if key not in FIELDS:
            raise KeyError(f"no setting named {key!r} (declare it in app.core.settings.FIELDS)")
        super().__setitem__(key, value)

    def update(self, other=(), **kw):
        for k, v in dict(other, **kw).items():
            self[k] = v

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({**self.unknown, **self}, indent=2), "utf-8")
        os.replace(tmp, self.path)  # atomic: a crash never leaves half a file
