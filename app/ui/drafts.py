"""Each chat keeps its own draft: what is typed in the input box, and the files attached to it,
stay with the chat when another one opens and come back when it opens again, after a restart
too: the text is stored with the chat, the files as the store's attachments (content-addressed,
as a sent message's), named in the chat's options."""

from __future__ import annotations

from .attachments import Attachment


class Drafts:
    def __init__(self, composer, store):
        self.composer, self.store = composer, store
        self.cid: int | None = None  # the chat whose draft is in the input box

    def switch(self, cid: int) -> None:
        """Another chat opened: the input's draft goes with the chat before, this one's comes back.
        (An edit in progress was left before this: the input holds the draft, not the edit.)"""
        if cid == self.cid:
            return
        if self.cid is not None:
            self._keep(*self.composer.take_draft())
        self.cid = cid
        conv = self.store.conversation(cid)
        opts = conv.options if conv else None
        self.composer.put_draft(opts.draft if opts else "", self._files(opts.draft_files) if opts else [])

    def close(self) -> None:
        """The window closes: the open chat's draft into the store, once (a window closed twice,
        as tests do, must not write to the store closed the first time)."""
        if self.cid is not None:
            self._keep(self.composer.input.toPlainText(), list(self.composer.attach_bar.items))
        self.cid = None

    def _keep(self, text: str, files: list) -> None:
        if self.store.conversation(self.cid) is None:  # (deleted)
            return
        kept = tuple(self.store.save_attachment(a.data, a.name, a.kind, a.source) for a in files)
        self.store.update_chat_options(self.cid, draft=text, draft_files=kept)

    def _files(self, entries) -> list[Attachment]:
        """The draft's files as they were attached; one whose file is gone is left out."""
        out = []
        for e in entries:
            path = self.store.attachment_path(e)
            if path is not None and path.is_file() and e.get("kind") in ("text", "image", "audio"):
                out.append(Attachment(path.read_bytes(), str(e.get("name", path.name)), e["kind"],
                                      str(e.get("source", ""))))
        return out
