"""One name for what drafted and one acceptance on every surface; messages that start as
sentences do."""


def test_messages_start_with_a_capital_but_names_keep_their_spelling():
    from app.core.help_text import sentence

    assert sentence("the prompt is empty") == "The prompt is empty"
    assert sentence("notes.gguf: not a GGUF model file") == "notes.gguf: not a GGUF model file"
    assert sentence("max_tokens must be at least 1") == "max_tokens must be at least 1"
    assert sentence("/tmp/x.gguf: no such file") == "/tmp/x.gguf: no such file"
    assert sentence("") == ""


def test_long_lookup_drafts_share_the_last_position_bar():
    """Lookup proposes dozens of tokens: positions past 8 are one '9+' bar, accepted / drafted
    over them, so the bars (weighted by their drafts) still average to the acceptance."""
    from app.core.help_text import MAX_BARS, position_bars

    drafted = [10] * 8 + [4] * 30
    accepted = [9] * 8 + [1] * 30
    values, labels = position_bars({"drafted_at": drafted, "accepted_at": accepted})
    assert labels == [str(i) for i in range(1, MAX_BARS + 1)] + ["9+"] and len(values) == 9
    assert values[:8] == [0.9] * 8 and values[8] == 30 / 120
    shown = [10] * 8 + [120]
    assert sum(v * d for v, d in zip(values, shown)) / sum(shown) == sum(accepted) / sum(drafted)
    assert position_bars({"per_position_acceptance": [0.5] * 12}) == ([0.5] * 8, [str(i) for i in range(1, 9)])


def test_a_reply_s_details_list_the_same_bars_and_the_acceptance():
    from app.core.help_text import acceptance_details

    d = acceptance_details({"drafted_at": [4] * 20, "accepted_at": [2] * 20, "acceptance_rate": 0.5,
                            "accepted_tokens": 40, "draft_tokens": 80, "steps": 4})
    assert d.count("<tr>") == 9 and "draft 9+" in d and "40 of 80 drafted tokens accepted in 4 verify steps: 50 %" in d


def test_what_became_of_an_asked_for_call_is_said_in_the_footer():
    from types import SimpleNamespace as NS

    from app.session.worker import call_outcome_note

    asked = NS(force_tool="get_time", tools=({"function": {"name": "get_time"}},))
    cut = NS(cut_call="get_t", calls=[])
    text, origins = call_outcome_note(cut, asked, "Sure. <|tool_call>call:get_t", [["Sure. ", True], ["<|tool_call>", False],
                                                                               ["call:get_t", False]], live := {"footer": "9 tokens"})
    assert (text, origins) == ("Sure.", [["Sure.", True]])
    assert live["footer"] == "9 tokens · the call of get_time was cut off by the token limit (Max reply tokens), so it was not run"
    ignored = {"footer": "5 tokens", "finish_reason": "stop"}
    assert call_outcome_note(NS(cut_call="", calls=[]), asked, "It is noon.", [], ignored)[0] == "It is noon."
    assert ignored["footer"] == "5 tokens · the answer did not call get_time, which was asked for"
    fine = {"footer": "5 tokens"}
    call_outcome_note(NS(cut_call="", calls=["a call"]), asked, "", [], fine)
    assert fine["footer"] == "5 tokens"


def test_the_prefill_field_says_what_came_from_the_cache():
    """A regenerate reads one token again: "53 tok/s" read as a very slow prefill; it says the
    prompt came from the cache instead. A turn that read more gives its rate and the reuse."""
    from app.core.help_text import prefill_text

    assert prefill_text({"prompt_tokens": 18377, "reused_tokens": 18376, "prefill_tps": 53.0}) == \
        "18,376 of 18,377 cached"
    assert prefill_text({"prompt_tokens": 19637, "reused_tokens": 18373, "prefill_tps": 2109.4}) == \
        "2109 tok/s, 18,373 cached"
    assert prefill_text({"prompt_tokens": 500, "reused_tokens": 0, "prefill_tps": 2109.4}) == "2109 tok/s"
    assert prefill_text({}) == "–"
