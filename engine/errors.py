"""Errors the engine raises on purpose: each carries a message meant for a user."""


class TandemError(Exception):
    """Base class: str(error) is one line a user can act on."""


class ModelFileError(TandemError):
    """A GGUF file is missing, unreadable, truncated or of the wrong kind."""


class DrafterMismatchError(TandemError):
    """The drafter GGUF does not belong to the target GGUF."""


class MTPUnavailableError(TandemError):
    """MTP was asked for, but the loaded models cannot do it."""


class ContextOverflowError(TandemError):
    """The prompt does not fit in the context window."""

    def __init__(self, message: str, needed: int, n_ctx: int):
        super().__init__(message)
        self.needed = needed
        self.n_ctx = n_ctx


class TemplateError(TandemError):
    """The chat template could not be rendered."""


class EngineError(TandemError):
    """llama.cpp refused an operation (load, context creation, decode)."""


class ModelUnloaded(EngineError):
    """The engine was closed (another model was loaded) before a request reached it."""
