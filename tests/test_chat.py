"""Chat templates (sandboxed), thinking split, multi-turn prefix reuse, context overflow."""

from __future__ import annotations

import pytest

from engine.chat import ChannelSplitter, ChatTemplate
from engine.engine import Engine, GenerationConfig
from engine.errors import ContextOverflowError, TemplateError
from engine.runtime import LoadOptions
from engine.testmodels import CHAT_TEMPLATE


def test_template_renders_gemma4_turns():
    t = ChatTemplate(CHAT_TEMPLATE, bos_token="<bos>")
    out = t.render([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                    {"role": "assistant", "content": "<|channel>thought\nhmm<channel|>Hello!"},
                    {"role": "user", "content": "Again"}])
    assert out == ("<bos><|turn>system\nBe brief.<turn|>\n<|turn>user\nHi<turn|>\n"
                   "<|turn>model\nHello!<turn|>\n<|turn>user\nAgain<turn|>\n"
                   "<|turn>model\n<|channel>thought\n<channel|>")
    thinking = t.render([{"role": "user", "content": "Hi"}], enable_thinking=True)
    assert thinking.startswith("<bos><|turn>system\n<|think|>\n<turn|>\n") and thinking.endswith("<|turn>model\n")


@pytest.mark.parametrize("evil", [
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ messages.append(1) }}",
    "{% for x in range(10**9) %}{% endfor %}{{ cycler.__init__.__globals__ }}",
])
def test_template_sandbox_refuses_unsafe_templates(evil):
    with pytest.raises(TemplateError):
        ChatTemplate(evil).render([{"role": "user", "content": "x"}])


def test_template_errors_are_clear():
    with pytest.raises(TemplateError, match="chat template failed"):
        ChatTemplate("{{ raise_exception('only user and model roles') }}").render([{"role": "user", "content": "x"}])
    with pytest.raises(TemplateError, match="unknown message role"):
        ChatTemplate(CHAT_TEMPLATE).render([{"role": "tool", "content": "x"}])


def test_channel_splitter_token_level():
    s = ChannelSplitter()
    out = [s.feed("Hi ", None), s.feed("", "<|channel>"), s.feed("thou", None), s.feed("ght\nI think", None),
           s.feed(" hard", None), s.feed("", "<channel|>"), s.feed("Answer", None)]
    answer = "".join(a for a, _ in out)
    thinking = "".join(t for _, t in out)
    assert answer == "Hi Answer" and thinking == "I think hard"


def test_thinking_tokens_stream_to_the_thinking_channel(engine07):
    # Feed the model a prompt ending inside an open thought channel: everything it writes
    # until it would close the channel is thinking, not answer.
    prompt = engine07.tokenize("<bos><|turn>user\nHi<turn|>\n<|turn>model\n<|channel>thought\n", False, True)
    engine07.reset()
    r = engine07.run(prompt, GenerationConfig(max_tokens=12))
    assert r.thinking and not r.answer


def test_multi_turn_prefix_reuse_matches_fresh_decode(engine07):
    msgs = [{"role": "user", "content": "Hello world, this is a test"}]
    engine07.reset()
    first = engine07.run(engine07.format_chat(msgs), GenerationConfig(max_tokens=24))
    msgs += [{"role": "assistant", "content": first.answer}, {"role": "user", "content": "And now?"}]
    prompt = engine07.format_chat(msgs)
    cont = engine07.run(prompt, GenerationConfig(max_tokens=32))
    assert cont.stats.reused_tokens > 10  # the first turn was not decoded again
    engine07.reset()
    fresh = engine07.run(prompt, GenerationConfig(max_tokens=32))
    assert fresh.stats.reused_tokens == 0
    assert cont.tokens == fresh.tokens


def test_edit_and_regenerate_roll_back_to_common_prefix(engine07):
    base = [{"role": "user", "content": "a b c d e f g"}]
    engine07.reset()
    engine07.run(engine07.format_chat(base), GenerationConfig(max_tokens=16))
    edited = engine07.format_chat([{"role": "user", "content": "a b c d x y z"}])
    after_edit = engine07.run(edited, GenerationConfig(max_tokens=16, draft_max=4))
    regen = engine07.run(edited, GenerationConfig(max_tokens=16, draft_max=4))  # regenerate
    engine07.reset()
    fresh = engine07.run(edited, GenerationConfig(max_tokens=16, draft_max=4))
    assert after_edit.tokens == regen.tokens == fresh.tokens
    assert 0 < after_edit.stats.reused_tokens < len(edited)
    assert regen.stats.reused_tokens == len(edited) - 1  # only the last prompt token again


def test_switching_mtp_per_request_without_reload(engine07):
    p = engine07.tokenize("zzz yyy xxx www")
    a = engine07.run(p, GenerationConfig(max_tokens=20, use_mtp=True, draft_max=2))
    b = engine07.run(p, GenerationConfig(max_tokens=20, use_mtp=False))
    c = engine07.run(p, GenerationConfig(max_tokens=20, use_mtp=True, draft_max=5))
    assert (a.stats.mode, b.stats.mode, c.stats.mode) == ("mtp", "baseline", "mtp")
    assert (a.stats.draft_max, c.stats.draft_max) == (2, 5)
    assert a.tokens == b.tokens == c.tokens


def test_context_overflow_is_reported_and_oldest_turns_can_be_dropped(tiny):
    e = Engine.load(tiny["target"], tiny[0.7], LoadOptions(n_ctx=256))
    try:
        long_msgs = []
        for i in range(12):
            long_msgs += [{"role": "user", "content": f"question {i} " + "word " * 10},
                          {"role": "assistant", "content": f"answer {i} " + "text " * 10}]
        long_msgs.append({"role": "user", "content": "last question"})
        with pytest.raises(ContextOverflowError) as err:
            e.chat(long_msgs)
        assert err.value.n_ctx == 256 and err.value.needed > 256
        assert "context" in str(err.value)
        trimmed = e.drop_oldest_turns(long_msgs)
        assert trimmed[-1] == long_msgs[-1] and len(trimmed) < len(long_msgs)
        r = e.run(e.format_chat(trimmed), GenerationConfig(max_tokens=8))
        assert r.stats.generated_tokens == 8
        # A generation that reaches the end of the context stops with reason "context".
        near_full = e.tokenize("a " * 120)
        r = e.run(near_full, GenerationConfig(max_tokens=500))
        assert r.finish_reason == "context"
        assert len(near_full) + r.stats.generated_tokens <= 257
    finally:
        e.close()
