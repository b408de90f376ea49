"""Hosted tools: the ones an API's own cloud runs (OpenAI's web search, file search, computer
use, code interpreter; Anthropic's web search, web fetch, code execution). A local server runs
none of them, and agents send some by default (Codex offers `web_search` unless told not to),
so they are left out of what the model is offered, with one log line and a /metrics counter
(tandem:hosted_tools_left_out_total), and the request is answered. Any other tool type that
is not a function is still refused by name."""

from __future__ import annotations

# OpenAI Responses tool types (and their dated variants, which start with these)
RESPONSES_HOSTED = ("web_search", "file_search", "computer_use", "computer", "code_interpreter",
                    "image_generation", "mcp")
# Anthropic server tools: web_search_20250305, web_fetch_20250910, code_execution_20250825...
MESSAGES_HOSTED = ("web_search_", "web_fetch_", "code_execution_")


def is_hosted(kind, hosted: tuple[str, ...]) -> bool:
    return isinstance(kind, str) and any(kind == h or kind.startswith(h) for h in hosted)


def left_out_note(kinds: list[str]) -> str:
    """The log line for a request whose hosted tools were left out."""
    return (f"hosted tools left out ({', '.join(sorted(set(kinds)))}): this server runs none; "
            "the model was offered the request's other tools")
