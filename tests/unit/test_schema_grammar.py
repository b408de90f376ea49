"""JSON schemas as grammars, without a model: hostile schemas refused in bounded time naming the
keyword and where, recursive schemas, closed objects and bounded numbers, checked by matching
text byte by byte (the real MTP path under a grammar: tests/engine/test_grammar.py)."""

from __future__ import annotations

import json
import time

import pytest

from engine.local.grammar import GrammarError, from_json_schema


@pytest.mark.parametrize("schema, words", [
    ({"type": "object", "properties": {"n": {"type": "array", "uniqueItems": True}}},
     r"'uniqueItems' \(at /properties/n\)"),
    ({"if": {"required": ["a"]}, "then": {"required": ["b"]}}, r"'if' \(at /\), 'then' \(at /\)"),
    ({"properties": {"re": {"type": "string", "format": "regex"}}}, r"'format' \(at /properties/re\).*regex"),
    ({"properties": {"n": {"oneOf": [{"type": "integer"}, {"type": "number"}]}}}, r"'oneOf' \(at /properties/n\)"),
    ({"type": "object", "properties": {"a": {}}, "additionalProperties": True, "minProperties": 2},
     r"'minProperties' \(at /\)"),
    ({"enum": list(range(5000))}, "enum has 5000 values"),
    ({"$ref": "https://example.com/schema.json"}, "only local references"),
    (json.loads('{"items": ' * 40 + '{}' + '}' * 40), "nests deeper"),
    ("{not json", "not valid JSON"),
    ({"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(3000)}}, "larger than 64 KB"),
])
def test_hostile_schemas_are_refused_naming_the_problem(schema, words):
    t = time.perf_counter()
    with pytest.raises(GrammarError, match=words):
        from_json_schema(schema)
    assert time.perf_counter() - t < 5  # bounded, not a hang (a generous bound, not a speed claim)


def test_a_recursive_schema_is_a_grammar_not_a_hang():
    tree = {"$defs": {"node": {"type": "object", "properties": {"kids": {"type": "array",
                                                                          "items": {"$ref": "#/$defs/node"}}}}},
            "type": "object", "properties": {"tree": {"$ref": "#/$defs/node"}}}
    assert from_json_schema(tree)


def _matches(grammar: str, text: str) -> bool:
    """Whether a grammar takes `text` whole, read byte by byte (a tokenizer of 256 byte tokens)."""
    import llguidance

    class Bytes:
        eos_token_id, bos_token_id = 256, None
        tokens = [bytes([i]) for i in range(256)] + [b"<eos>"]

        def __call__(self, b):
            return list(b)

    m = llguidance.LLMatcher(llguidance.LLTokenizer(llguidance.TokenizerWrapper(Bytes())), grammar)
    data = list(text.encode())
    return m.validate_tokens(data) == len(data) and m.consume_tokens(data) and m.is_accepting()


def test_objects_hold_the_keys_their_schema_names_unless_it_asks_for_more():
    """Found on real-world schemas: a schema that declares properties but says nothing of others
    let a model write invented keys until max_tokens (llama-server's converter leaves them out,
    as tool calls' arguments here do). An explicit `additionalProperties` keeps its word, and
    sub-schemas combined by intersection (allOf) are left as they are: closing each would
    forbid the other's keys."""
    user = {"type": "object", "properties": {"name": {"type": "string"},
                                            "address": {"type": "object", "properties": {"city": {"type": "string"}}}}}
    g = from_json_schema(user)
    assert _matches(g, '{"name": "Ann", "address": {"city": "Oslo"}}')
    assert not _matches(g, '{"name": "Ann", "age": 3}')
    assert not _matches(g, '{"address": {"city": "Oslo", "zip": "0150"}}')
    assert _matches(from_json_schema({**user, "additionalProperties": True}), '{"name": "Ann", "age": 3}')
    # a property may be called "properties" or "allOf": names, not keywords
    assert _matches(from_json_schema({"type": "object", "properties": {"properties": {"type": "integer"},
                                                                       "allOf": {"type": "integer"}}}),
                    '{"properties": 1, "allOf": 2}')
    both = {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                      {"type": "object", "properties": {"b": {"type": "integer"}}, "required": ["b"]}]}
    assert _matches(from_json_schema(both), '{"a": 1, "b": 2}')
    # draft 3's `"required": true` is not a list of names: refused in words (it was a TypeError: a 500)
    inner = {"type": "object", "properties": {"b": {"type": "integer"}}, "required": True}
    with pytest.raises(GrammarError, match="required"):
        from_json_schema({"type": "object", "properties": {"a": inner}})
    # an object that requires a key it does not declare stays open (closed, it could never be written)
    assert _matches(from_json_schema({"type": "object", "properties": {"a": {}}, "required": ["id"]}), '{"id": 1}')


def test_unbounded_numbers_stop_at_16_digits_before_the_point():
    """Found on real-world schemas: a random model wrote "6868686868..." until max_tokens. As
    llama.cpp's converter and tool calls' arguments: 16 digits; a schema's own bounds stand."""
    g = from_json_schema({"type": "object", "properties": {"n": {"type": "number"}, "i": {"type": ["integer", "null"]}}})
    assert _matches(g, '{"n": -1234567890123456.5, "i": 9007199254740991}')
    assert not _matches(g, '{"n": 12345678901234567}') and not _matches(g, '{"i": 9007199254740992}')
    assert _matches(from_json_schema({"type": "integer", "minimum": 10**17}), str(10**17 + 1))


@pytest.mark.parametrize("schema, left_out, good, bad", [
    ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, ["'uniqueItems' (at /)"], "[1, 2]", "[1, 1]"),
    ({"type": "object", "properties": {"re": {"type": "string", "format": "frob"},
                                       "n": {"oneOf": [{"type": "integer"}, {"type": "number"}]}}},
     ["'format' (at /properties/re) = 'frob'", "'oneOf' (at /properties/n), enforced as 'anyOf'"],
     '{"n": 1.5}', '{"n": 1}'),
    ({"type": "object", "if": {"required": ["a"]}, "then": {"required": ["b"]}}, ["'if' (at /)", "'then' (at /)"],
     '{"a": 1, "b": 2}', '{"a": 1}'),
])
def test_without_strict_what_cannot_be_enforced_is_left_out_named_and_checked_on_the_reply(schema, left_out, good,
                                                                                             bad):
    """OpenAI's split: strict refuses these by name (above); without it the grammar enforces the
    rest, and the finished reply is checked against the whole schema."""
    from engine.local.unenforced import check_reply, lenient_grammar

    with pytest.raises(GrammarError):
        from_json_schema(schema)
    grammar, notes = lenient_grammar(schema)
    assert grammar and sorted(notes) == sorted(left_out)
    assert check_reply(good, schema, notes).valid is True
    report = check_reply(bad, schema, notes)
    assert report.valid is False and report.errors and "did not meet it" in report.line()
    assert check_reply("[1, 2", schema, notes).valid is False  # cut: not JSON


def test_a_schema_bad_for_another_reason_is_still_refused_without_strict():
    from engine.local.unenforced import lenient_grammar

    for schema in ({"enum": list(range(5000))}, {"$ref": "https://example.com/s.json"},
                   {"type": "string", "pattern": "(a"}):
        with pytest.raises(GrammarError):
            lenient_grammar(schema)
