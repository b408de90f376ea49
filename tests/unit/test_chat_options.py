"""A chat's own options: one typed record, stored as JSON; what older Tandems wrote still loads."""

import json
import sqlite3

import pytest

from app.core.chat_types import ChatOptions
from app.core.store import Store
from engine.generation import AUTO


def test_old_stored_options_load_and_survive_a_change(tmp_path):
    path = tmp_path / "chats.sqlite3"
    s = Store(path)
    cid = s.create_conversation("old")
    s.close()
    old = {"use_mtp": False, "draft_max": 0, "thinking": True, "allowed_tools": ["today", 7],
           "tools": "yes", "system_prompt": None, "from_a_newer_tandem": [1, 2]}  # 0: Tandem 0.1's auto
    db = sqlite3.connect(path)
    db.execute("UPDATE conversations SET settings=? WHERE id=?", (json.dumps(old), cid))
    db.commit()
    db.close()
    s = Store(path)
    try:
        o = s.conversation(cid).options
        assert (o.drafting, o.draft_max, o.thinking, o.allowed_tools, o.tools, o.system_prompt) == (
            False, AUTO, True, ("today",), False, "")  # "yes" is not a bool: the default
        s.update_chat_options(cid, system_prompt="Be brief.")
        o2 = s.conversation(cid).options
        assert o2 == o.but(system_prompt="Be brief.")  # the rest kept, the newer key too
        stored = json.loads(s.export_json(cid))["settings"]
        assert stored["from_a_newer_tandem"] == [1, 2] and stored["use_mtp"] is False
    finally:
        s.close()


def test_a_bad_draft_length_is_refused_where_the_options_are_made():
    with pytest.raises(ValueError, match="draft length"):
        ChatOptions(draft_max=99)
    with pytest.raises(ValueError):
        ChatOptions().but(draft_max=0)
    assert ChatOptions.from_stored({"draft_max": 99}).draft_max == AUTO  # a stored one falls back
    assert ChatOptions.from_stored("not an object") == ChatOptions()
    # a switch holds a bool; anything else is the default, as the docstring says
    wrong = ChatOptions.from_stored({"use_mtp": "no", "thinking": 1, "tools": "false"})
    assert (wrong.drafting, wrong.thinking, wrong.tools) == (True, False, False)
