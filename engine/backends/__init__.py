"""Backends: where decoding happens. `Backend` is the interface; the local llama.cpp engine
(`engine.engine.Engine`) and `RemoteBackend` (an OpenAI-compatible server) implement it."""

from .base import Backend

__all__ = ["Backend"]
