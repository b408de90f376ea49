"""Each chat keeps its own draft: what is typed in the input box, and the files attached to it,
stay with the chat when another one opens and come back when it opens again. The text is stored
with the chat (it survives a restart); the attached files are kept for this session only (their
bytes are not worth a database row for a message not yet sent)."""

from __future__ import annotations


class Drafts:
    def __init__(self, composer, store):
        self.composer, self.store = composer, store
        self.cid: int | None = None  # the chat whose draft is in the input box
        self.files: dict[int, list] = {}  # chat id -> its draft's attachments

    def switch(self, cid: int) -> None:
        """Another chat opened: the input's draft goes with the chat before, this one's comes back.
        (An edit in progress was left before this: the input holds the draft, not the edit.)"""
        if cid == self.cid:
            return
        if self.cid is not None and self.store.conversation(self.cid) is not None:  # (not deleted)
            text, self.files[self.cid] = self.composer.take_draft()
            self.store.update_chat_options(self.cid, draft=text)
        self.cid = cid
        conv = self.store.conversation(cid)
        self.composer.put_draft(conv.options.draft if conv else "", self.files.pop(cid, []))

    def close(self) -> None:
        """The window closes: the open chat's draft text into the store, once (a window closed
        twice, as tests do, must not write to the store closed the first time)."""
        if self.cid is not None and self.store.conversation(self.cid) is not None:
            self.store.update_chat_options(self.cid, draft=self.composer.input.toPlainText())
        self.cid = None
