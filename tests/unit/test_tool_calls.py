"""The Gemma 4 call syntax read piece by piece, tool declarations and forced-call grammars
checked, and a reply's finish reason after calls: pure functions, no model."""

from __future__ import annotations

import json

import pytest

from engine.gemma4.call_grammar import calls_grammar, check_tools
from engine.gemma4.calls import CallParser, ToolError, parse_call

from ..support.tool_schemas import TOOLS


# ---- the call syntax, piece by piece -------------------------------------------------------
def test_calls_are_read_from_the_model_syntax_and_bad_ones_stay_text():
    call = parse_call('call:get_weather{city:<|"|>Paris, "France"<|"|>,days:3,t:-1.5e2,ok:true,x:null,'
                      'nested:{a:[1,<|"|>b<|"|>,{c:false}]}}')
    assert call.name == "get_weather"
    assert call.arguments == {"city": 'Paris, "France"', "days": 3, "t": -150.0, "ok": True, "x": None,
                              "nested": {"a": [1, "b", {"c": False}]}}
    p = CallParser(["get_weather"])
    out = p.feed("Let me check. ")
    for marker, text in (("<|tool_call>", ""), ("", "call:get_weather{city:"), ('<|"|>', ""), ("", "Oslo"),
                         ('<|"|>', ""), ("", "}"), ("<tool_call|>", "")):
        out += p.feed(text, marker)
    out += p.feed("", "<|tool_call>") + p.feed("call:rm_rf{path:1}") + p.feed("", "<tool_call|>")  # not declared
    out += p.feed("", "<|tool_call>") + p.feed("call:get_weather{city:}") + p.feed("", "<tool_call|>")  # bad args
    out += p.feed("", "<|tool_call>") + p.feed("call:get_weather{city:1")  # cut off by the token budget
    out += p.finish()
    assert out[0] == ("text", "Let me check. ") and out[1][0] == "call" and out[1][1].arguments == {"city": "Oslo"}
    assert [v for k, v in out[2:]] == ["<|tool_call>call:rm_rf{path:1}<tool_call|>",
                                       "<|tool_call>call:get_weather{city:}<tool_call|>",
                                       "<|tool_call>call:get_weather{city:1"]
    for bad in ("call:f{" + "a:[" * 100 + "]" * 100 + "}", "call:f{a:1} trailing", "call:bad name{}", "nocall{}"):
        with pytest.raises((ValueError, RecursionError)):
            parse_call(bad)


def test_a_number_beyond_what_json_can_carry_is_no_call():
    """Found by Codex against tandem serve: `1e999` (the call grammar allows 4 exponent digits)
    became Infinity, and the arguments Codex got were not JSON. Such a call stays text."""
    assert json.loads(parse_call("call:f{a:1.5e308,b:-2e-400}").arguments_json) == {"a": 1.5e308, "b": -0.0}
    for bad in ("call:f{a:1e999}", "call:f{b:-1e400}", "call:f{c:[1,2e309]}"):
        with pytest.raises(ValueError, match="JSON"):
            parse_call(bad)
    p = CallParser(["f"])
    out = p.feed("", "<|tool_call>") + p.feed("call:f{a:1e999}") + p.feed("", "<tool_call|>")
    assert out == [("text", "<|tool_call>call:f{a:1e999}<tool_call|>")]


def test_declarations_and_choices_are_checked():
    for bad, why in (([], "non-empty"), ([{"type": "function", "function": {"name": "a b"}}], "name"),
                     ([{"type": "function", "function": {"name": "f"}}] * 2, "two tools"),
                     ([{"type": "code_interpreter"}], r"tools\[0\] must be"),
                     ([{"type": "function", "function": {"name": "f", "parameters": json.loads(
                         "{\"a\":" * 40 + "1" + "}" * 40)}}], "deeper")):
        with pytest.raises(ToolError, match=why):
            check_tools(bad)
    tools = check_tools(TOOLS)
    g = calls_grammar(tools, "get_weather", parallel=False)
    assert "list_files" not in g and '"get_weather"' in g and "start: call\n" in g
    assert "start: thought? call+" in calls_grammar(tools, thinking=True) and "start: call+" in calls_grammar(tools)
    with pytest.raises(ToolError, match="not among"):
        calls_grammar(tools, "nope")
    recursive = [{"type": "function", "function": {"name": "tree", "parameters": {
        "type": "object", "properties": {"node": {"$ref": "#/$defs/N"}},
        "$defs": {"N": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/N"}}}}}}}}]
    assert "ref-t0-n: " in calls_grammar(check_tools(recursive))
    with pytest.raises(ToolError, match="only local references"):
        calls_grammar(check_tools([{"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": {"a": {"$ref": "https://example.com/s.json"}}}}}]))


def test_a_reply_cut_by_the_budget_says_length_even_after_a_call():
    """A complete call, then the budget cuts the next one: the client must see "length" (the
    reply was cut), not "tool_calls" as if the model had finished; the cut call stays text."""
    from engine.serve.reply import ChoiceReply
    from engine.generation import GenerationEvent
    from engine.stats import GenerationStats
    from engine.gemma4.text import TokenPiece

    def ev(parts, finish=None):
        stats = GenerationStats(finish_reason=finish)
        pieces = [TokenPiece(0, "" if m else t, False, "control" if m else "answer", m) for t, m in parts]
        return GenerationEvent(pieces, "", "", stats, finish)

    call = [("", "<|tool_call>"), ("call:get_weather{city:", ""), ("", '<|"|>'), ("Oslo", ""), ("", '<|"|>'),
            ("}", ""), ("", "<tool_call|>")]
    for finish, want in (("length", "length"), ("stop", "tool_calls")):
        r = ChoiceReply("chat", [], lambda t: b"", tool_names={"get_weather"})
        r.feed(ev(call))
        r.feed(ev([("", "<|tool_call>"), ("call:get_wea", "")] if finish == "length" else [], finish))
        assert r.finish_reason() == want and [c.arguments for c in r.calls] == [{"city": "Oslo"}]
        assert (r.choice(0).message.content or "") == ("<|tool_call>call:get_wea" if finish == "length" else "")
