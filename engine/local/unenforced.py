"""A JSON schema's keywords the grammar engine cannot enforce while decoding (uniqueItems,
propertyNames, if/then/else, an unknown format, a oneOf whose branches may overlap, ...), for a
request that did not ask for strict decoding (OpenAI's split: `strict: true` refuses them by name,
grammar.py; without it they are left out of the grammar, said, and checked on the finished reply
with `jsonschema` against the whole schema).

`lenient_grammar(schema)` is the grammar of what can be enforced and the list of what was left
out, each keyword named with where the schema uses it; `check_reply(text, schema)` says whether
a finished reply meets the whole schema.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field

from .grammar import GrammarError, _check_schema, _NAMED, _VALUES, _where, from_json_schema

MAX_ROUNDS = 16  # compiles to find every keyword left out (each names one kind)
CHECK_TIMEOUT_S = 2.0  # the reply's check (a schema's patterns run in Python's re, without bounds of its own)


def _without(schema, key: str, value=None, rename: str | None = None):
    """`schema` with the keyword `key` (with that value, when given) left out everywhere it is a
    keyword, or renamed to `rename`: the same walk as grammar._where."""
    if isinstance(schema, list):
        return [_without(v, key, value, rename) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for k, v in schema.items():
        if k == key and (value is None or v == value):
            if rename:
                out[rename] = _without(v, key, value, rename)
            continue
        if k in _VALUES:
            out[k] = v
        elif k in _NAMED and isinstance(v, dict):
            out[k] = {name: _without(sub, key, value, rename) for name, sub in v.items()}
        else:
            out[k] = _without(v, key, value, rename)
    return out


def _left_out(message: str) -> list[tuple[str, object, str | None]]:
    """From llguidance's complaint: (keyword, its value or None, what it becomes or None) for each
    keyword it names; [] when the complaint is of another kind (a bad schema)."""
    m = re.search(r"Unimplemented keys: \[([^\]]*)\]", message)
    if m:
        return [(k, None, None) for k in re.findall(r'"([^"]+)"', m.group(1))]
    if m := re.search(r"Unknown format: (.+)", message):
        return [("format", m.group(1).strip(), None)]
    if "oneOf constraints are not supported" in message:
        return [("oneOf", None, "anyOf")]  # enforced as anyOf: one branch or more holds
    if "min/maxProperties only supported" in message:
        return [("minProperties", None, None), ("maxProperties", None, None)]
    return []


def lenient_grammar(schema) -> tuple[str, list[str]]:
    """(grammar, what it leaves unenforced): the schema's keywords that cannot be enforced, each
    as "'uniqueItems' (at /properties/tags)" (a format with its value: "'format' (at /x) =
    'path'"), left out one kind at a time until it compiles. A schema that is bad for another
    reason is a GrammarError, as from from_json_schema."""
    _check_schema(schema)
    notes: list[str] = []
    for _ in range(MAX_ROUNDS):
        try:
            return from_json_schema(schema), notes
        except GrammarError as e:
            found = _left_out(e.raw)
            if not found:
                raise
        for key, value, rename in found:
            where = _where(schema, key, value=value)
            if where is None:
                continue
            notes.append(f"{key!r} (at {where})" + (f" = {value!r}" if value is not None else "")
                         + (f", enforced as {rename!r}" if rename else ""))
            schema = _without(schema, key, value, rename)
    raise GrammarError(f"the JSON schema leaves too much unenforced: {', '.join(notes)[:300]}")


@dataclass
class SchemaReport:
    """What a reply decoded under a lenient grammar was, against the whole schema: `valid` is
    None when the check could not finish (CHECK_TIMEOUT_S)."""

    unenforced: list[str]
    valid: bool | None = None
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"unenforced": self.unenforced, "valid": self.valid, "errors": self.errors}

    def line(self) -> str:
        met = {True: "met it", False: "did not meet it", None: "was not checked in time"}[self.valid]
        return f"the schema's {', '.join(self.unenforced)} not enforced while decoding; the reply {met}" + (
            f" ({self.errors[0]})" if self.errors else "")


def check_reply(text: str, schema, unenforced: list[str]) -> SchemaReport:
    """The finished reply against the whole schema (in a thread of its own, bounded in time)."""
    import jsonschema

    report = SchemaReport(unenforced)

    def check():
        try:
            value = json.loads(text)
        except ValueError as e:
            report.valid, report.errors = False, [f"not JSON: {e}"[:200]]
            return
        cls = jsonschema.validators.validator_for(schema)
        errors = sorted(cls(schema, format_checker=cls.FORMAT_CHECKER).iter_errors(value), key=lambda e: e.path)
        report.errors = [f"{'/' + '/'.join(map(str, e.absolute_path))}: {e.message}"[:200] for e in errors[:5]]
        report.valid = not errors

    t = threading.Thread(target=check, name="tandem-schema-check", daemon=True)
    t.start()
    t.join(CHECK_TIMEOUT_S)
    return report if not t.is_alive() else SchemaReport(unenforced)
