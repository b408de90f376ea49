"""The backend interface: what the app's engine thread and the CLI talk to.

Two implementations yield the same `GenerationEvent`s and `GenerationStats`:
  - `engine.engine.Engine`: llama.cpp in this process (baseline and MTP, Tandem's own loop);
  - `engine.backends.remote.RemoteBackend`: an OpenAI-compatible server (llama-server, vLLM,
    SGLang, Ollama) doing the decoding; draft statistics come from what the server reports.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Callable, Iterator

if TYPE_CHECKING:
    from ..engine import GenerationConfig, GenerationEvent


class Backend(ABC):
    kind: str = "local"  # "local" or "remote"
    engine_name: str = "llama.cpp"  # what decodes: llama.cpp, llama-server, vllm, openai-compatible
    has_mtp: bool = False  # drafting happens (remote: the server reported drafts, or its setup says so)
    mtp_reason: str = ""  # why not, in words
    can_switch_mtp: bool = True  # per request; servers choose speculation per server

    @property
    @abstractmethod
    def n_ctx(self) -> int | None:
        """Context size in tokens, if known."""

    @abstractmethod
    def chat(self, messages: list[dict], config: "GenerationConfig", enable_thinking: bool = False,
             should_stop: Callable[[], bool] | None = None, answer_prefix: str = "") -> Iterator["GenerationEvent"]:
        """Stream the answer to a chat. Errors in the request raise here, before iterating."""

    @abstractmethod
    def cancel(self) -> None:
        """Stop the generation in progress at once (callable from another thread)."""

    @abstractmethod
    def close(self) -> None:
        """Free what the backend holds (models, connections)."""

    def count_tokens(self, messages: list[dict], enable_thinking: bool = False) -> int | None:
        """Tokens the chat takes in the context, or None where the backend cannot tell."""
        return None

    def drop_oldest_turns(self, messages: list[dict], enable_thinking: bool = False,
                          should_stop: Callable[[], bool] | None = None) -> list[dict]:
        return messages

    def reset(self) -> None:
        """Forget cached context (Compare runs start from scratch). Servers keep their own."""
