"""Chat formatting: the model's own template, rendered in a Jinja sandbox, and the split of
Gemma 4 output into thinking and answer text.

Templates come from model files, i.e. from outside: they are rendered in an
ImmutableSandboxedEnvironment (no attribute tricks, no mutation of our objects) inside a
helper process that bounds their time, memory and output, and nothing in a template or in
model output is ever executed or loaded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

from ..errors import TemplateError
from .template_sandbox import max_output_chars, shared_renderer

TOOL_FIELDS = ("tool_calls", "tool_call_id", "name")  # passed to the template when a message has them
# also passed when present: an assistant's earlier thinking (the template decides whether it shows)
MESSAGE_FIELDS = (*TOOL_FIELDS, "reasoning_content")
CHANNEL_OPEN = "<|channel>"
CHANNEL_CLOSE = "<channel|>"

# Used when a file carries no template: the plain Gemma turn format.
FALLBACK_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<start_of_turn>"
    "{{ 'model' if m['role'] == 'assistant' else 'user' }}\n{{ m['content'] | trim }}<end_of_turn>\n"
    "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)


@dataclass(frozen=True)
class ChatTemplate:
    source: str
    bos_token: str = ""
    eos_token: str = ""

    def render(self, messages: list[dict], add_generation_prompt: bool = True,
               enable_thinking: bool = False, should_stop: Callable[[], bool] | None = None,
               tools: list[dict] | None = None) -> str:
        """Render in the sandbox process (bounded time, memory and output; see
        template_sandbox). `should_stop` is polled while waiting: True abandons the render.
        `tools` (OpenAI function declarations) and the messages' tool fields (an assistant's
        `tool_calls`, a tool message's `tool_call_id` and `name`) and an assistant's earlier
        thinking (`reasoning_content`) go to the template as given."""
        out = []
        for m in messages:
            if not isinstance(m, dict) or not isinstance(m.get("content"), str):
                raise TemplateError("a chat message must be a {'role': ..., 'content': text} mapping")
            if m.get("role") not in ("system", "user", "assistant", "tool"):
                raise TemplateError(f"unknown message role {m.get('role')!r}")
            out.append({k: m[k] for k in ("role", "content", *MESSAGE_FIELDS) if k in m})
        variables = {
            "messages": out,
            "add_generation_prompt": add_generation_prompt,
            "enable_thinking": enable_thinking,
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
        }
        if tools:
            variables["tools"] = tools
        extra = len(json.dumps(tools)) if tools else 0
        return shared_renderer().render(self.source, variables, max_output_chars(messages) + 4 * extra, should_stop)

    @property
    def supports_tools(self) -> bool:
        """The template renders tool declarations and calls (Gemma 4's does; Gemma 3's does not)."""
        return "tools" in self.source and "tool_calls" in self.source


class ChannelSplitter:
    """Token-level parser for Gemma 4's thinking channel.

    `<|channel>` (one special token) opens a channel whose name runs to the first newline
    ("thought"); text up to `<channel|>` is thinking. Other control tokens are hidden.
    """

    def __init__(self):
        self.in_channel = False
        self._name_pending = False

    def feed(self, text: str, control: str | None) -> tuple[str, str]:
        """One token: its text, or for a control token its marker. Returns (answer, thinking)."""
        if control is not None:
            if control == CHANNEL_OPEN:
                self.in_channel = True
                self._name_pending = True
            elif control == CHANNEL_CLOSE:
                self.in_channel = False
                self._name_pending = False
            return "", ""
        if not self.in_channel:
            return text, ""
        if self._name_pending:
            nl = text.find("\n")
            if nl < 0:
                return "", ""
            self._name_pending = False
            text = text[nl + 1:]
        return "", text
