"""The context meter's parts and the overflow question, with a stand-in count (one token per
character of each message, five per tool, a few for the template's markup)."""

from app.session.context_parts import ContextParts, count_parts, overflow_help


def count(messages, tools):
    return 3 + sum(len(m.get("content", "")) + 40 * len(m.get("attachments", [])) for m in messages) + \
        5 * len(tools or [])


def test_each_part_is_the_difference_it_makes():
    msgs = [{"role": "system", "content": "x" * 10}, {"role": "user", "content": "y" * 7, "attachments": [{}]}]
    p = count_parts(count, msgs, [{}, {}])
    assert (p.total, p.tools, p.files, p.system, p.conversation) == (70, 10, 40, 10, 10)
    assert p.lines() == ["attached files: 40 tokens", "tool declarations: 10 tokens", "system prompt: 10 tokens",
                         "conversation: 10 tokens"]


def test_an_empty_chat_takes_nothing_but_its_tools_and_system_prompt():
    assert count_parts(count, [], None) == ContextParts(0)
    assert count_parts(lambda m, t: None, [], None) is None  # a server counts
    assert count_parts(count, [], [{}]).tools == 5
    assert count_parts(count, [{"role": "system", "content": "abc"}], None).system == 3


def test_overflow_offers_only_what_helps():
    tools = ContextParts(5000, tools=4500)
    h = overflow_help("the conversation is 5000 tokens", tools, 4096, older_turns=False, tools_on=True)
    assert h.title == "Tools take too much of the context" and h.choices == ("tools_off", "settings")
    assert h.text.startswith("This chat's prompt is 5,000 tokens; the model's context holds 4,096,")
    assert "• tool declarations: 4,500 tokens" in h.text and "drop the oldest" not in h.text
    assert overflow_help("the conversation is 5000 tokens", None, 0, False, False).text.startswith(
        "The conversation is 5000 tokens.")  # no count: the engine's words
    h = overflow_help("x", ContextParts(5000, files=4000), 4096, older_turns=True, tools_on=False)
    assert h.title == "Conversation too long" and h.choices == ("drop", "settings")
    h = overflow_help("x", ContextParts(5000), 4096, older_turns=False, tools_on=True)  # tools on but take nothing
    assert h.choices == ("settings",) and "now 4,096 tokens" in h.text

