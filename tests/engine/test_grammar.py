"""Constrained decoding with llguidance, on the real MTP path: the output follows the grammar,
MTP under a grammar equals baseline under it (rejections and the sliding-window cache
included), a grammar that allows everything changes nothing, sampling stays within the
grammar, bounds are enforced (schemas as grammars alone: tests/unit/test_schema_grammar.py)."""

from __future__ import annotations

import json

import pytest

from engine.local.engine import Engine
from engine.generation import GenerationConfig
from engine.local.grammar import GrammarError, from_gbnf, from_json_schema
from engine.sampling import SamplingParams

from ..support.record_schema import SCHEMA, valid_record

ANYTHING = from_gbnf('root ::= char*\nchar ::= [\\x00-\\x7F] | [^\\x00-\\x7F]')


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
        valid_record(base.answer)
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
        seen.add(json.dumps(valid_record(r.answer), sort_keys=True))
    assert len(seen) > 1  # it samples: not one fixed answer


def test_a_bad_grammar_is_one_error_before_streaming(engines):
    with pytest.raises(GrammarError, match="not valid GBNF"):
        from_gbnf("root ::= (unclosed")
    with pytest.raises(GrammarError, match="cannot be used"):
        engines["0.7"].generate([1, 2, 3], GenerationConfig(grammar="start: nowhere"))


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
