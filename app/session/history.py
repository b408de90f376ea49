"""What a request is made of: a chat's messages as the model reads them (its path, its system
prompt, its attachments as files) and the generation settings with the chat's own switches."""

from __future__ import annotations

from engine.generation import choose_spec

from app.core.chat_types import ChatOptions, ModelInfo, ReplySettings
from app.core.settings import sampling_params
from app.core.store import Store
from app.core.text_files import AttachedFile, decode_text


def with_system(default_prompt: str, options: ChatOptions, msgs: list[dict]) -> list[dict]:
    """The chat's own system prompt if it has one, else the default from Settings."""
    sp = options.system_prompt.strip() or default_prompt.strip()
    return ([{"role": "system", "content": sp}] if sp else []) + msgs


def chat_messages(store: Store, cid: int, info: ModelInfo | None, upto: int | None = None) -> list[dict]:
    """The chat's path (to its leaf, or to message `upto`) as the model reads it, without the
    system prompt; attachments go as files, decoded in the engine thread."""
    out = []
    # earlier tool calls and results go to a model whose template reads them (Gemma 4's, or a
    # server's, in OpenAI's shape); to any other the chat goes on without them
    keep_tools = bool(info and info.tools)
    for m in store.messages(cid, upto):
        if m.role not in ("user", "assistant", "tool") or (m.role == "tool" and not keep_tools):
            continue
        d = m.as_chat()
        if not keep_tools:
            d.pop("tool_calls", None)
        files = [{"path": str(p), "name": str(i.get("name", "")), "kind": str(i.get("kind", "image"))}
                 for i in m.media if (p := store.attachment_path(i)) is not None]
        if files:
            d["attachments"] = files
        out.append(d)
    return out


def reply_settings(app_settings, options: ChatOptions, info: ModelInfo | None, tools: list) -> ReplySettings:
    """The app's generation settings with this chat's switches; drafting only where the loaded
    model can switch it (a server that drafts decides for itself)."""
    can = bool(info and info.can_draft and (not info.remote or info.can_switch_mtp))
    return ReplySettings(sampling=sampling_params(app_settings), max_tokens=app_settings["max_tokens"],
                         spec=choose_spec(drafting=options.drafting and can), draft_max=options.draft_max,
                         thinking=options.thinking, tools=tuple(tools))


class AttachedTexts:
    """The text files attached in a chat, each decoded once."""

    def __init__(self, store: Store):
        self.store = store
        self._texts: dict = {}  # attachment path -> its text

    def files(self, cid: int | None) -> list[AttachedFile]:
        """The chat's text files as shown (newest last): what a reply's code block may be a new
        version of."""
        out = []
        if cid is None:
            return out
        for m in self.store.messages(cid):
            for item in m.media:
                path = self.store.attachment_path(item)
                if item.get("kind") != "text" or path is None:
                    continue
                if path not in self._texts:
                    try:
                        self._texts[path] = decode_text(path.read_bytes())
                    except (OSError, ValueError):
                        continue
                out.append(AttachedFile(str(item.get("name", "")), self._texts[path], str(item.get("source", ""))))
        return out
