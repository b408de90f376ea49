"""Media files made on the spot: a random PNG picture and a WAV tone."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image


def png(w=64, h=48, seed=1) -> bytes:
    b = io.BytesIO()
    Image.fromarray(np.random.default_rng(seed).integers(0, 255, (h, w, 3), dtype=np.uint8)).save(b, "PNG")
    return b.getvalue()


def tone(seconds=2.0, hz=440) -> bytes:
    """A WAV file: a sine tone, 16 kHz mono."""
    import wave

    t = np.arange(int(16000 * seconds)) / 16000
    b = io.BytesIO()
    with wave.open(b, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes((0.3 * np.sin(2 * np.pi * hz * t) * 32767).astype(np.int16).tobytes())
    return b.getvalue()
