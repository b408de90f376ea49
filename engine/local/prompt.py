"""Text <-> tokens and chats -> prompt tokens, for one model's vocabulary and chat template.

The template's own markup may contain control tokens; the messages' text never becomes one.
Pictures and sounds become the projector's positions (negative pseudo-token ids) where their
message's marker sits in the rendered chat.
"""

from __future__ import annotations

import ctypes
import re
from functools import partial
from typing import Callable

from ..gemma4.chat import FALLBACK_TEMPLATE, ChatTemplate
from ..errors import EngineError
from .llama import lib

MEDIA_MARK = re.compile("\ue002(\\d+)\ue003")  # where a message's media go in the rendered chat


class Prompts:
    def __init__(self, vocab, model, n_ctx: int):
        self.vocab = vocab
        self.n_ctx = n_ctx
        self.projector = None  # engine.local.media.Projector when pictures and sounds are loaded
        self._piece_cache: dict[int, bytes] = {}
        self._control: dict[int, str | None] = {}
        self._control_text_cache: dict[str, bool] = {}
        self._marker_re: re.Pattern | None = None
        tmpl_ptr = lib.llama_model_chat_template(model, None)
        source = tmpl_ptr.decode("utf-8", "replace") if tmpl_ptr else FALLBACK_TEMPLATE
        self.template = ChatTemplate(
            source,
            bos_token=self._token_text(lib.llama_vocab_bos(vocab)),
            eos_token=self._token_text(lib.llama_vocab_eos(vocab)),
        )

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        data = text.encode("utf-8")
        n_max = len(data) + 16
        buf = (lib.llama_token * n_max)()
        n = lib.llama_tokenize(self.vocab, data, len(data), buf, n_max, add_special, parse_special)
        if n < 0:
            n_max = -n
            buf = (lib.llama_token * n_max)()
            n = lib.llama_tokenize(self.vocab, data, len(data), buf, n_max, add_special, parse_special)
        if n < 0:
            raise EngineError("tokenization failed")
        return list(buf[:n])

    def _token_text(self, tok: int) -> str:
        if tok < 0:
            return ""
        return self.piece(tok, special=True).decode("utf-8", "replace")

    def piece(self, tok: int, special: bool = False) -> bytes:
        key = tok if not special else -1 - tok
        b = self._piece_cache.get(key)
        if b is None:
            buf = ctypes.create_string_buffer(64)
            n = lib.llama_token_to_piece(self.vocab, tok, buf, 64, 0, special)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = lib.llama_token_to_piece(self.vocab, tok, buf, -n, 0, special)
            b = buf.raw[: max(n, 0)]
            self._piece_cache[key] = b
        return b

    def control_text(self, tok: int) -> str | None:
        """The marker text of a control token, None for ordinary text tokens."""
        if tok not in self._control:
            is_ctl = lib.llama_vocab_is_control(self.vocab, tok)
            self._control[tok] = self._token_text(tok) if is_ctl else None
        return self._control[tok]

    def token_bytes(self, tok: int) -> bytes:
        """A token's bytes as the model wrote them, a control token's marker included."""
        return self.piece(tok, special=True)

    def detokenize(self, tokens: list[int]) -> str:
        return b"".join(self.piece(t) for t in tokens).decode("utf-8", "replace")

    def is_eog(self, tok: int) -> bool:
        return bool(lib.llama_vocab_is_eog(self.vocab, tok))

    # ---- chat --------------------------------------------------------------------------
    def format_chat(self, messages: list[dict], enable_thinking: bool = False,
                    should_stop: Callable[[], bool] | None = None, answer_prefix: str = "",
                    tools: list[dict] | None = None) -> list[int]:
        """The prompt tokens of a chat. The template's own markup may contain control tokens;
        the messages' text never becomes one: '<end_of_turn>' typed by the user (or written
        by the model as plain text) stays plain text. `answer_prefix` is the start of the
        model's answer (Continue on a cut reply): it follows the generation prompt, as text.
        `tools` are OpenAI function declarations for a template that renders them; their text
        and that of earlier calls' arguments never become control tokens either."""
        if tools or any(m.get("tool_calls") for m in messages):
            from ..errors import TemplateError

            if not self.template.supports_tools:
                raise TemplateError("this model's chat template has no tool calling (Gemma 4's has)")
            tools = self._defused(tools) if tools else None
            messages = [{**m, "tool_calls": self._defused(m["tool_calls"])} if m.get("tool_calls") else m
                        for m in messages]
        render = partial(self._render, tools=tools)
        if any(m.get("media") for m in messages):
            tokens = self._format_media(messages, enable_thinking, should_stop, render)
        else:
            tokens = self._format_chat(messages, enable_thinking, should_stop, render)
        if answer_prefix:
            tokens += self.plain(answer_prefix)
        return tokens

    def _render(self, messages, enable_thinking, should_stop, tools=None) -> str:
        return self.template.render(messages, add_generation_prompt=True, enable_thinking=enable_thinking,
                                    should_stop=should_stop, tools=tools)

    def _format_chat(self, messages, enable_thinking, should_stop, render) -> list[int]:
        text = render(messages, enable_thinking, should_stop)
        if not any(self._has_control_text(m["content"]) for m in messages):
            return self.tokenize(text, add_special=False, parse_special=True)
        spans = self._message_spans(text, messages, enable_thinking, should_stop, render)
        if spans is None:  # the template changed the text beyond recognition: defuse the markers
            return self._format_defused(messages, enable_thinking, should_stop, render)
        return self._tokenize_spans(text, spans, lambda s, e: self.plain(text[s:e]))

    def _tokenize_spans(self, text: str, spans, inside: Callable[[int, int], list[int]]) -> list[int]:
        """The rendered chat's tokens: the template's markup between the message spans may hold
        control tokens; each message span is tokenized by `inside` (never as control tokens)."""
        tokens, pos = [], 0
        for start, end in spans:
            if start > pos:
                tokens += self.tokenize(text[pos:start], add_special=False, parse_special=True)
            tokens += inside(start, end)
            pos = end
        return tokens + (self.tokenize(text[pos:], add_special=False, parse_special=True) if pos < len(text) else [])

    def _format_media(self, messages, enable_thinking, should_stop, render) -> list[int]:
        """A chat whose messages carry images or audio: each item's marker goes before its
        message's text, the template is rendered, and the rendered text is tokenized piece
        by piece (message text never as control tokens), each marker replaced by the item's
        positions from the projector."""
        from ..errors import TemplateError
        from .media import MediaError

        if self.projector is None:
            raise MediaError("this model has no projector (mmproj) loaded: it cannot read pictures or audio")
        items, marked = [], []
        for m in messages:
            text = str(m.get("content", "")).replace("\ue002", "").replace("\ue003", "")
            marks = ""
            for media in m.get("media") or []:
                marks += f"\ue002{len(items)}\ue003"
                items.append(media)
            marked.append({**m, "content": marks + ("\n" if marks and text else "") + text})
        for media in items:
            why = self.projector.supports(media)
            if why:
                raise MediaError(f"{media.name}: {why}")
        text = render(marked, enable_thinking, should_stop)
        spans = self._message_spans(text, marked, enable_thinking, should_stop, render)
        if spans is None:
            raise TemplateError("this model's chat template changes messages in a way that leaves no place "
                                "for pictures or audio")

        def inside(start: int, end: int) -> list[int]:  # message text, with each marker's media positions
            tokens, at = [], start
            for mk in MEDIA_MARK.finditer(text, start, end):
                if mk.start() > at:
                    tokens += self.plain(text[at:mk.start()])
                tokens += self.projector.tokens(items[int(mk.group(1))])[0]
                at = mk.end()
            return tokens + (self.plain(text[at:end]) if end > at else [])

        return self._tokenize_spans(text, spans, inside)

    def _message_spans(self, text, messages, enable_thinking, should_stop, render) -> list[tuple[int, int]] | None:
        """Where each message's text sits in the rendered prompt: render again with a marker
        in place of each message, then match the real render piece by piece (a template may
        trim a message). None if the two renders do not line up."""
        marks = [{**m, "content": f"\ue000{i}\ue001"} for i, m in enumerate(messages)]
        probe = render(marks, enable_thinking, should_stop)
        parts = re.split("\ue000(\\d+)\ue001", probe)  # piece, index, piece, index, ..., piece
        spans, pos = [], 0
        for j in range(0, len(parts) - 1, 2):
            if int(parts[j + 1]) >= len(messages):
                return None
            piece, content, after = parts[j], messages[int(parts[j + 1])]["content"], parts[j + 2]
            if not text.startswith(piece, pos):
                return None
            pos += len(piece)
            for cand in (content, content.strip()):
                if text.startswith(cand, pos) and text.startswith(after, pos + len(cand)):
                    spans.append((pos, pos + len(cand)))
                    pos += len(cand)
                    break
            else:
                return None
        return spans if text[pos:] == parts[-1] else None

    def _markers(self) -> re.Pattern:
        """The texts of the vocabulary's user-defined marker tokens (`<...>`: Gemma 4's
        <|tool_call>, <|"|>, <|channel> ... are such tokens), which llama.cpp reads as the token
        even in text tokenized without special tokens."""
        if self._marker_re is None:
            attr = getattr(lib, "llama_vocab_get_attr", None) or lib.llama_token_get_attr
            texts = set()
            for tok in range(lib.llama_vocab_n_tokens(self.vocab)):
                if attr(self.vocab, tok) & lib.LLAMA_TOKEN_ATTR_USER_DEFINED:
                    t = self._token_text(tok)
                    if len(t) > 1 and t.startswith("<") and t.endswith(">"):
                        texts.add(t)
            self._marker_re = re.compile("|".join(re.escape(t) for t in sorted(texts, key=len, reverse=True))
                                         or "(?!x)x")
        return self._marker_re

    def plain(self, text: str) -> list[int]:
        """Text from outside (a message, a tool's result) as tokens that are never a control or
        marker token: where a marker's text occurs it is tokenized in two pieces, cut after its
        first character."""
        cuts = [m.start() + 1 for m in self._markers().finditer(text)]
        if not cuts:
            return self.tokenize(text, add_special=False, parse_special=False)
        bounds = [0] + cuts + [len(text)]
        return [t for a, b in zip(bounds, bounds[1:]) if b > a
                for t in self.tokenize(text[a:b], add_special=False, parse_special=False)]

    def _has_control_text(self, text: str) -> bool:
        if text not in self._control_text_cache:
            if len(self._control_text_cache) > 4096:
                self._control_text_cache.clear()
            self._control_text_cache[text] = bool(self._markers().search(text)) or (
                self.tokenize(text, add_special=False, parse_special=True)
                != self.tokenize(text, add_special=False, parse_special=False))
        return self._control_text_cache[text]

    def _format_defused(self, messages, enable_thinking, should_stop, render) -> list[int]:
        """Fallback: every special-token text in the messages defused (see _defuse)."""
        out = [{**m, "content": self._defuse(m["content"])} for m in messages]
        return self.tokenize(render(out, enable_thinking, should_stop), add_special=False, parse_special=True)

    def _defuse(self, text: str) -> str:
        """A word joiner after the first character of every special-token text, so none of them
        can be read as the token."""
        if not self._has_control_text(text):
            return text
        special = set(self.tokenize(text, add_special=False, parse_special=True))
        for tok in special - set(self.tokenize(text, add_special=False, parse_special=False)):
            marker = self._token_text(tok)
            if len(marker) > 1:
                text = text.replace(marker, marker[0] + "\u2060" + marker[1:])
        return self._markers().sub(lambda m: m.group(0)[0] + "\u2060" + m.group(0)[1:], text)

    def _defused(self, value):
        """`_defuse` on every string (keys too) of JSON-like data: tool declarations and calls."""
        if isinstance(value, str):
            return self._defuse(value)
        if isinstance(value, list):
            return [self._defused(v) for v in value]
        if isinstance(value, dict):
            return {self._defuse(k) if isinstance(k, str) else k: self._defused(v) for k, v in value.items()}
        return value

    def drop_oldest_turns(self, messages: list[dict], enable_thinking: bool = False,
                          should_stop: Callable[[], bool] | None = None,
                          tools: list[dict] | None = None) -> list[dict]:
        """Remove the oldest user/assistant exchanges (keeping a system message and the last
        user message) until the prompt (with its tool declarations) leaves room to answer; what a user accepts when told
        the conversation no longer fits. Binary search over how many to drop: a prompt only
        gets shorter as exchanges go, so this renders the chat O(log n) times, not n."""
        msgs = list(messages)
        head = [m for m in msgs[:1] if m.get("role") == "system"]
        body = msgs[len(head):]
        room = max(64, self.n_ctx // 8)
        cuts = [0]  # body[cuts[j]:] is what remains after dropping j exchanges
        while len(body) - cuts[-1] > 1:
            c = cuts[-1]
            cuts.append(c + (2 if len(body) - c > 2 and body[c + 1].get("role") == "assistant" else 1))

        def fits(j):
            return len(self.format_chat(head + body[cuts[j]:], enable_thinking, should_stop, tools=tools)) + room <= self.n_ctx

        lo, hi = 0, len(cuts) - 1  # the answer is in [lo, hi]; hi (one message left) is the floor
        while lo < hi:
            mid = (lo + hi) // 2
            if fits(mid):
                hi = mid
            else:
                lo = mid + 1
        return head + body[cuts[lo]:]
