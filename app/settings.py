"""User settings as JSON under the platformdirs user config folder."""

from __future__ import annotations

import json
import os
from pathlib import Path

DEFAULTS = {
    "target": "",
    "drafter": "",
    "target_gpu_layers": 0,
    "drafter_gpu_layers": 0,
    "n_ctx": 4096,
    "threads": 0,
    "temperature": 0.0,
    "top_k": 64,
    "top_p": 0.95,
    "min_p": 0.0,
    "repeat_penalty": 1.0,
    "max_tokens": 1024,
    "system_prompt": "",
    "theme": "system",  # system | light | dark
    "use_mtp": True,
    "draft_max": 0,  # 0 = auto
    "font_scale": 1.0,  # Ctrl+plus / Ctrl+minus / Ctrl+0
    "geometry": "",  # the window's size and place, restored at the next start (Qt's saveGeometry, base64)
}


def default_config_path() -> Path:
    from platformdirs import user_config_dir

    return Path(user_config_dir("Tandem", appauthor=False)) / "settings.json"


class Settings(dict):
    def __init__(self, path: str | Path | None = None):
        super().__init__(DEFAULTS)
        self.path = Path(path) if path else default_config_path()
        try:
            data = json.loads(self.path.read_text("utf-8"))
            for k, v in (data.items() if isinstance(data, dict) else ()):
                if k in DEFAULTS:
                    try:
                        self[k] = type(DEFAULTS[k])(v)
                    except (TypeError, ValueError):
                        pass
        except (OSError, ValueError):
            pass  # first run, or an unreadable file: defaults

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(dict(self), indent=2), "utf-8")
        os.replace(tmp, self.path)  # atomic: a crash never leaves half a file
