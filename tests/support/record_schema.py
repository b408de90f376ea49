"""The record schema the constrained-decoding tests ask for, and the check of what came back."""

from __future__ import annotations

import json

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["ok", "tag", "name", "items"],
          "properties": {"ok": {"type": "boolean"}, "tag": {"enum": ["alpha", "beta"]},
                         "name": {"type": "string", "maxLength": 12},
                         "items": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3}}}


def valid_record(text: str) -> dict:
    obj = json.loads(text)
    assert set(obj) == {"ok", "tag", "name", "items"} and isinstance(obj["ok"], bool)
    # (maxLength counts characters as the grammar reads bytes: a random model's stray bytes decode to
    # several U+FFFD, so the name's length is not checked here)
    assert obj["tag"] in ("alpha", "beta") and isinstance(obj["name"], str) and len(obj["items"]) <= 3
    return obj
