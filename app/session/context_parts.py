"""What takes a chat's context: its prompt split into tool declarations, attached files, the
system prompt and the conversation, each counted by the engine that will decode it (the
difference each makes to the whole prompt), so the meter equals the prompt the engine reads
and a chat that does not fit can say what takes the room."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from app.core.help_text import sentence

# count(messages, tools): the engine's prompt tokens for them, or None where it cannot tell
Count = Callable[[list, "list | None"], "int | None"]


@dataclass(frozen=True)
class ContextParts:
    total: int
    tools: int = 0
    files: int = 0
    system: int = 0

    @property
    def conversation(self) -> int:
        return max(0, self.total - self.tools - self.files - self.system)

    def lines(self) -> list[str]:
        """The parts that take room, largest first, as the meter's tooltip lists them."""
        named = [("tool declarations", self.tools), ("attached files", self.files),
                 ("system prompt", self.system), ("conversation", self.conversation)]
        return [f"{name}: {n:,} tokens" for name, n in sorted(named, key=lambda p: -p[1]) if n > 0]


def count_parts(count: Count, messages: list[dict], tools: list | None) -> ContextParts | None:
    """The prompt's tokens and its parts (None: the engine cannot count). Renders the chat up
    to four times; only what the chat has is rendered again. A chat with no turns yet counts as
    its first prompt with an empty message: the room its tools and system prompt take before the
    user types (templates such as Gemma 4's render no prompt without a message)."""
    if not any(m.get("role") != "system" for m in messages):
        if not (messages or tools):  # an empty chat takes nothing yet (None: a server counts)
            return None if count([], None) is None else ContextParts(0)
        messages = [*messages, {"role": "user", "content": ""}]
    total = count(messages, tools)
    if total is None:
        return None
    no_tools = count(messages, None) if tools else total
    plain = [{k: v for k, v in m.items() if k != "attachments"} for m in messages]
    has_files = any(m.get("attachments") for m in messages)
    no_files = count(plain, None) if has_files else no_tools
    has_system = bool(plain) and plain[0].get("role") == "system"
    no_system = count(plain[1:], None) if has_system else no_files
    return ContextParts(total, tools=max(0, total - no_tools), files=max(0, no_tools - no_files),
                        system=max(0, no_files - no_system))


@dataclass(frozen=True)
class OverflowHelp:
    """What the window says when a chat does not fit, and what it offers."""
    title: str
    text: str
    # "drop" (leave out the oldest turns), "tools_off" (and answer), "tools_off_only", "settings" (a bigger context)
    choices: tuple[str, ...]


def overflow_help(engine_words: str, parts: ContextParts | None, n_ctx: int, older_turns: bool,
                  tools_on: bool) -> OverflowHelp:
    """Say what takes the room (tools, files, history) and offer only what can help: leaving
    out older turns where there are some, switching tools off where their declarations take
    room, a bigger context always."""
    if parts is not None and parts.total and n_ctx:  # the numbers, without the engine's advice (not all of it helps)
        text = (f"This chat's prompt is {parts.total:,} tokens; the model's context holds {n_ctx:,}, "
                "and the answer needs room too.\n\nWhat takes the room:\n"
                + "\n".join(f"• {line}" for line in parts.lines()))
    else:
        text = sentence(engine_words) + "."
    choices = (("drop",) if older_turns else ()) + (("tools_off",) if tools_on and parts and parts.tools else ())
    title = "Conversation too long" if older_turns else \
        "Tools take too much of the context" if "tools_off" in choices else "Message too long for the context"
    if not older_turns and not choices:
        text += ("\n\nYour message is back in the input box: shorten it, or raise the context size "
                 f"(now {n_ctx:,} tokens) in Settings.")
    return OverflowHelp(title, text, choices + ("settings",))


def files_overflow_help(parts: ContextParts | None, used: int, files: list[tuple[str, int]], n_ctx: int,
                        tools_on: bool) -> OverflowHelp:
    """Attached files that do not fit beside the chat (`used` tokens; `files`: (name, tokens)),
    said before sending: the same breakdown as a chat that does not fit, and what can help."""
    total = sum(n for _, n in files)
    over = used + total - n_ctx
    names = ", ".join(f"{name} ({n:,})" for name, n in files)
    text = (f"The attached files take {total:,} tokens ({names}) and the chat already uses {used:,} of the "
            f"{n_ctx:,}-token context: {over:,} tokens too many, with no room left for the answer.")
    base = parts if parts is not None and parts.total else ContextParts(used)
    room = ContextParts(used + total, tools=base.tools, files=base.files + total, system=base.system)
    text += "\n\nWhat takes the room:\n" + "\n".join(f"• {line}" for line in room.lines())
    text += "\n\nNothing was sent or removed: you can also remove some files, or start a new chat."
    # tools off only: the files wait to be sent until the meter has counted the chat without them
    choices = ("tools_off_only",) if tools_on and parts and parts.tools else ()
    return OverflowHelp("The attached files do not fit", text, choices + ("settings",))
