"""Tandem's engine: Gemma 4 + MTP drafter on llama.cpp. Knows nothing of Qt."""

__version__ = "0.1.0"

from .errors import (ContextOverflowError, DrafterMismatchError, EngineError, ModelFileError,  # noqa: E402
                     MTPUnavailableError, TandemError, TemplateError)

__all__ = ["__version__", "TandemError", "ModelFileError", "DrafterMismatchError",
           "MTPUnavailableError", "ContextOverflowError", "TemplateError", "EngineError"]
