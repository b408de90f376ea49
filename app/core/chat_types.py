"""The typed records that pass between the window, the chat session and the engine worker.

The worker takes a `LoadRequest` or a `ReplyRequest` and answers with a `ModelInfo` or a
`ReplyResult`; none of them carries words for the screen except what the engine said.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from engine.generation import AUTO, check_draft_length
from engine.local.options import LoadOptions
from engine.sampling import SamplingParams


@dataclass(frozen=True)
class LoadRequest:
    """A local pair to load (`target`), or a server to connect to (`server`)."""

    target: str = ""
    drafter: str = ""
    mmproj: str | None = None  # None: look next to the target
    options: LoadOptions = LoadOptions()  # local: context, threads, GPU layers (the worker sets n_seq)
    server: str = ""  # remote: the server's base URL
    baseline_server: str = ""  # remote: the same model without a drafter, for Compare
    api_key: str = ""
    model: str = ""  # remote: the served model's name ("": the one it serves)
    connection: str = ""  # remote: the saved connection's name

    @property
    def remote(self) -> bool:
        return bool(self.server)


@dataclass(frozen=True)
class RemoteInfo:
    connection: str
    model: str
    server: str


@dataclass
class ModelInfo:
    """What is loaded, as the window shows it."""

    target: str  # local: the target's path ("" for a server)
    drafter: str
    target_name: str
    drafter_name: str
    n_ctx: int  # 0: the server did not say
    has_mtp: bool
    mtp_reason: str = ""
    engine: str = "llama.cpp"
    can_switch_mtp: bool = True  # drafting on or off per request (local models, tandem serve)
    remote: RemoteInfo | None = None
    baseline_server: str = ""  # remote: the connection's baseline server, when it answered
    baseline_error: str = ""  # remote: why the baseline server is not available
    vision: bool = False
    audio: bool = False
    mmproj: str = ""
    media_note: str = ""  # why pictures and sounds are off, when they are
    sources: list = field(default_factory=list)  # draft sources: "mtp" (the drafter), "lookup" (any local model)
    tools: bool = False  # the chat template declares tools and reads calls (Gemma 4's does)
    placement: str = ""  # local: the context and GPU layers chosen from the memory plan, and why

    @property
    def has_baseline(self) -> bool:
        """Compare can run a baseline: locally with a drafter, remotely on tandem serve or a baseline server."""
        return bool(self.baseline_server or self.can_switch_mtp) if self.remote else self.can_draft

    @property
    def can_draft(self) -> bool:
        """Drafting can be on: a drafter (MTP), or locally lookup, which every model has."""
        return bool(self.sources) or self.has_mtp

    @property
    def sources_label(self) -> str:
        """The drafting switch's text: which sources it turns on."""
        names = {"mtp": "MTP", "lookup": "Lookup"}
        return "MTP + lookup" if len(self.sources) == 2 else names[self.sources[0]] if self.sources else "MTP"

    @property
    def picker_key(self) -> str:
        """How the model picker names this model."""
        r = self.remote
        return f"remote:{r.connection}:{r.model}" if r else self.target

    def media_refusal(self, kind: str) -> str | None:
        """None when this model reads `kind` ("image" or "audio") attachments, else why not."""
        if (self.vision if kind == "image" else self.audio):
            return None
        if self.remote:
            return "pictures and sounds are not sent to servers yet"
        if kind == "audio" and self.vision:
            return "this model reads no audio (Gemma 4 E2B and E4B do)"
        return self.media_note or "this model has no projector (mmproj) for pictures"


@dataclass(frozen=True)
class ChatOptions:
    """One chat's own switches, kept with it by the store as a JSON object (`stored`); what an
    older or newer Tandem wrote still loads (`from_stored`). A bad draft length raises."""

    drafting: bool = True  # the drafting switch; stored as "use_mtp", the name every Tandem reads
    draft_max: int | str = AUTO
    thinking: bool = False
    system_prompt: str = ""  # "": the default from Settings
    tools: bool = False  # the switched-on MCP servers' tools are offered in this chat
    allowed_tools: tuple[str, ...] = ()  # tools run without asking, in this chat
    draft: str = ""  # what was left typed in the input box (app.ui.drafts)
    draft_files: tuple = ()  # the files left attached there: the store's attachment entries (dicts)
    unknown: tuple = ()  # (key, value) another Tandem version wrote: kept, written back

    def __post_init__(self):
        check_draft_length(self.draft_max)

    def but(self, **changes) -> "ChatOptions":
        """These options with some changed: the one way a chat's options change."""
        return replace(self, **changes)

    def stored(self) -> dict:
        return {**dict(self.unknown), "use_mtp": self.drafting, "draft_max": self.draft_max,
                "thinking": self.thinking, "system_prompt": self.system_prompt, "tools": self.tools,
                "allowed_tools": list(self.allowed_tools), **({"draft": self.draft} if self.draft else {}),
                **({"draft_files": [dict(f) for f in self.draft_files]} if self.draft_files else {})}

    @classmethod
    def from_stored(cls, data) -> "ChatOptions":
        """The options a stored object holds: a missing key or a value of the wrong type is the
        default (Tandem 0.1 wrote draft_max 0 for auto)."""
        data = data if isinstance(data, dict) else {}
        k = data.get("draft_max", AUTO)
        try:
            k = check_draft_length(AUTO if k in (0, None) else k)
        except ValueError:
            k = AUTO
        names = data.get("allowed_tools")
        known = {"use_mtp", "draft_max", "thinking", "system_prompt", "tools", "allowed_tools", "draft", "draft_files"}
        files = data.get("draft_files")

        def switch(key, default):  # a stored switch is a JSON bool; 1 or "yes" is not one
            value = data.get(key)
            return value if isinstance(value, bool) else default

        return cls(drafting=switch("use_mtp", True), draft_max=k, thinking=switch("thinking", False),
                   system_prompt=data["system_prompt"] if isinstance(data.get("system_prompt"), str) else "",
                   tools=switch("tools", False),
                   allowed_tools=tuple(n for n in names if isinstance(n, str)) if isinstance(names, list) else (),
                   draft=data["draft"] if isinstance(data.get("draft"), str) else "",
                   draft_files=tuple(f for f in files if isinstance(f, dict)) if isinstance(files, list) else (),
                   unknown=tuple((key, v) for key, v in data.items() if key not in known))


@dataclass(frozen=True)
class ReplySettings:
    """How one reply is generated: the app's settings, the chat's switches, and what the
    session adds for a Compare run, a continued reply or a retry without the oldest turns."""

    sampling: SamplingParams = SamplingParams()
    max_tokens: int = 1024
    spec: str = AUTO  # the drafting choice (engine.generation.SPECS); the chat's switch off: "none"
    draft_max: int | str = AUTO
    thinking: bool = False
    seed: int | None = None
    fresh: bool = False  # Compare: start from an empty cache, so both runs pay the same prefill
    drop_oldest: bool = False  # leave out the oldest turns until the chat fits the context
    answer_prefix: str = ""  # Continue: the reply so far, written on from
    on_baseline_server: bool = False  # remote Compare: the baseline run goes to the baseline server
    tools: tuple = ()  # OpenAI function declarations the model may call (the chat's MCP tools)
    force_tool: str = ""  # the tool this reply must call (the user asked for it), "" for the model to choose

    def but(self, **changes) -> "ReplySettings":
        return replace(self, **changes)


@dataclass(frozen=True)
class ReplyRequest:
    rid: int
    messages: list[dict]  # role/content dicts; "attachments": files the store keeps, decoded by the worker
    settings: ReplySettings


@dataclass
class ReplyResult:
    answer: str
    thinking: str
    origins: list = field(default_factory=list)  # [[text, drafted]] per answer token
    timeline: list = field(default_factory=list)  # [[seconds, answer, thinking]] for Replay
    stats: dict = field(default_factory=dict)  # GenerationStats.to_dict() and its footer
    usual_tps: float | None = None  # plain decoding speed this machine usually reaches with this model
    mtp_ceiling: float | None = None  # where measurements say MTP cannot beat plain decoding here
    mtp_costs_ms: tuple[float, float, float] | None = None  # those measurements: decode, verify of 2, draft step
    tool_calls: list = field(default_factory=list)  # [{"id", "name", "arguments"}] the answer ends with

    @property
    def finish_reason(self) -> str:
        return self.stats.get("finish_reason") or "error"
