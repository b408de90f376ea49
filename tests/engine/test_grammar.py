"""Constrained decoding with llguidance, on the real MTP path: the output follows the grammar,
MTP under a grammar equals baseline under it (rejections and the sliding-window cache
included), a grammar that allows everything changes nothing, sampling stays within the
grammar, bounds are enforced, and hostile schemas are refused in bounded time, naming the
keyword and where the schema uses it."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from engine.local.engine import Engine
from engine.generation import GenerationConfig
from engine.local.grammar import GrammarError, from_gbnf, from_json_schema
from engine.sampling import SamplingParams

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["ok", "tag", "name", "items"],
          "properties": {"ok": {"type": "boolean"}, "tag": {"enum": ["alpha", "beta"]},
                         "name": {"type": "string", "maxLength": 12},
                         "items": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3}}}
ANYTHING = from_gbnf('root ::= char*\nchar ::= [\\x00-\\x7F] | [^\\x00-\\x7F]')


def _valid(text: str) -> dict:
    obj = json.loads(text)
    assert set(obj) == {"ok", "tag", "name", "items"} and isinstance(obj["ok"], bool)
    # (maxLength counts characters as the grammar reads bytes: a random model's stray bytes decode to
    # several U+FFFD, so the name's length is not checked here)
    assert obj["tag"] in ("alpha", "beta") and isinstance(obj["name"], str) and len(obj["items"]) <= 3
    return obj


@pytest.fixture(scope="module")
def engines(tiny, noisy):
    es = {"0.7": Engine.load(tiny["target"], tiny[0.7]), "noisy": Engine.load(noisy["target"], noisy[1.0])}
    yield es
    for e in es.values():
        e.close()


PROMPTS = ["Give me a record as JSON", "Hello world, this is a test", "def f(x):\n    return x + 1"]


@pytest.mark.parametrize("which", ["0.7", "noisy"])
def test_mtp_under_a_schema_equals_baseline_under_it_and_the_output_validates(engines, which):
    e = engines[which]
    for prompt in PROMPTS:
        p = e.format_chat([{"role": "user", "content": prompt}])
        base = e.run(p, GenerationConfig(max_tokens=300, spec="none", json_schema=SCHEMA))
        assert base.finish_reason == "stop", base.answer  # the grammar closed the object, then the end
        _valid(base.answer)
        for k in (1, 3, "auto"):
            e.reset()
            m = e.run(p, GenerationConfig(max_tokens=300, draft_max=k, json_schema=SCHEMA))
            assert m.tokens == base.tokens, (prompt, k)
            assert m.stats.draft_tokens > 0 or k == "auto"
        # the noisy drafter's own drafts were rejected on the way (the grammar's forced tokens, drafted
        # as lookup drafts, are always kept)
        assert m.stats.mtp_draft_tokens == 0 or m.stats.mtp_accepted_tokens < m.stats.mtp_draft_tokens \
            or which == "0.7"


def test_constrained_greedy_is_unconstrained_greedy_wherever_the_grammar_allows_it(engines):
    """Until the first token the grammar rules out, the constrained reply is the free one; past
    the sliding window (the tiny model's is 16 tokens) and with MTP rejections too. (A grammar
    of text rules out tokens that are no text, such as control tokens and a lone UTF-8
    continuation byte: that is where they part.) Raw prompts: the chat template's turn markers
    would end the comparison at once."""
    from engine.local.grammar import Grammar

    e = engines["0.7"]
    for prompt in ("w000050 w000051 w000052", "Hello world, this is a test"):
        p = e.tokenize(prompt, add_special=True, parse_special=False)
        free = e.run(p, GenerationConfig(max_tokens=120, spec="none")).tokens
        for mtp in (False, True):
            e.reset()
            g = e.run(p, GenerationConfig(max_tokens=120, spec="auto" if mtp else "none", draft_max=3, grammar=ANYTHING))
            i = next((j for j, (a, b) in enumerate(zip(free, g.tokens)) if a != b), None)
            if i is not None:  # they part only where the grammar does not allow the free token
                check = Grammar(e.grammar_tokenizer, ANYTHING, e.rt.target.n_vocab)
                for t in free[:i]:
                    check.accept(t)
                assert not check.allows(free[i])
                check.close()
            assert i is None or i >= 40  # well past the sliding window
        assert g.stats.accepted_tokens < g.stats.draft_tokens  # some drafts were rejected on the way


def test_sampling_stays_within_the_schema_with_mtp(engines):
    e = engines["0.7"]
    p = e.format_chat([{"role": "user", "content": PROMPTS[0]}])
    seen = set()
    for seed in range(4):
        r = e.run(p, GenerationConfig(max_tokens=300, draft_max=3, json_schema=SCHEMA, seed=seed,
                                      sampling=SamplingParams(temperature=1.0, top_k=0, top_p=1.0)))
        assert r.finish_reason == "stop"
        seen.add(json.dumps(_valid(r.answer), sort_keys=True))
    assert len(seen) > 1  # it samples: not one fixed answer


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


def test_a_bad_grammar_is_one_error_before_streaming(engines):
    with pytest.raises(GrammarError, match="not valid GBNF"):
        from_gbnf("root ::= (unclosed")
    with pytest.raises(GrammarError, match="cannot be used"):
        engines["0.7"].generate([1, 2, 3], GenerationConfig(grammar="start: nowhere"))


def test_cli_json_schema_and_grammar(tiny, tmp_path):
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps(SCHEMA))
    run = [sys.executable, "-m", "app.main", "generate", "-m", str(tiny["target"]), "-d", str(tiny[0.7]),
           "--max-tokens", "300", "--json"]
    out = json.loads(subprocess.run(run + ["--json-schema", str(schema), "a record"], capture_output=True,
                                    text=True, timeout=300, check=True).stdout)
    _valid(out["text"])
    g = tmp_path / "yes.gbnf"
    g.write_text('root ::= "yes" | "no"')
    out = json.loads(subprocess.run(run + ["--grammar", str(g), "?"], capture_output=True, text=True, timeout=300,
                                    check=True).stdout)
    assert out["text"] in ("yes", "no")
    bad = tmp_path / "bad.json"
    bad.write_text('{"type": "array", "uniqueItems": true}')
    r = subprocess.run(run + ["--json-schema", str(bad), "x"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "'uniqueItems'" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_the_mask_and_the_single_checks_agree_along_a_reply(engines):
    """At every state of a JSON reply: greedy under the grammar is the argmax of the masked
    row, and each token's own check says what the mask says."""
    import numpy as np

    from engine.local.grammar import Grammar

    e = engines["0.7"]
    rng = np.random.default_rng(3)
    reply = e.run(e.format_chat([{"role": "user", "content": PROMPTS[0]}]),
                  GenerationConfig(max_tokens=60, spec="none", json_schema=SCHEMA)).tokens
    g = Grammar(e.grammar_tokenizer, from_json_schema(SCHEMA), e.n_vocab)
    for tok in reply:
        x = rng.standard_normal(e.n_vocab).astype(np.float32) * 4
        masked = g.constrain(x)
        assert g.best(x) == int(np.argmax(masked))
        for t in rng.integers(0, e.n_vocab, 40):
            assert g.allows(int(t)) == bool(np.isfinite(masked[t]))
        if e.is_eog(tok):
            break
        g.accept(tok)


BOUNDED = {"type": "object", "additionalProperties": False, "required": ["n", "when", "any"],
           "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 9},
                          "when": {"type": "string", "format": "date"}, "any": True}}


def test_bounds_formats_and_boolean_schemas_are_enforced_with_mtp_and_without(engines):
    """What the GBNF converter refused or crashed on (a range, a format, `true` as a schema) is
    enforced: on the random test model every reply is in range, with drafting and without; the
    tokens the grammar forces are drafted without the drafter."""
    e = engines["noisy"]
    for prompt in PROMPTS:
        p = e.format_chat([{"role": "user", "content": prompt}])
        base = e.run(p, GenerationConfig(max_tokens=200, spec="none", json_schema=BOUNDED))
        obj = json.loads(base.answer)
        assert 1 <= obj["n"] <= 9 and len(obj["when"]) == 10, obj
        e.reset()
        m = e.run(p, GenerationConfig(max_tokens=200, draft_max=3, json_schema=BOUNDED))
        assert m.tokens == base.tokens
        # the keys the schema fixes were drafted for free (as lookup drafts) and kept
        assert m.stats.lookup_draft_tokens > 0 and m.stats.lookup_accepted_tokens > 0
