"""Anthropic's and the Responses API's requests as the chat request every API shares, and the
replies' typed shapes as JSON: pure functions, no model (a stand-in engine answers what the
request's checks ask of it)."""

from __future__ import annotations

import json

import pytest

from engine.serve import chat_messages as cm
from engine.serve import anthropic_api, responses_api
from engine.serve import anthropic_shapes as an, openai_shapes as oa, responses_shapes as rs
from engine.serve import request as rq
from engine.serve.errors import ApiError


class Engine:
    """What rq.config asks of an engine: its context, vocabulary and drafter."""

    n_ctx, n_vocab, has_mtp = 8192, 1000, True


FN = {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}


def test_responses_items_become_chat_messages_and_calls_keep_their_namespace():
    req = responses_api.ResponsesRequest(instructions="Be brief.", input=[
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Use tools."}]},
        {"role": "user", "content": "List files"},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call", "call_id": "c1", "name": "exec", "arguments": '{"cmd": "ls"}'},
        {"type": "function_call", "call_id": "c2", "name": "spawn", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "a.txt"},
        {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "ok"}]}],
        tools=[{"type": "function", "name": "exec", "parameters": FN},
               {"type": "namespace", "name": "agents", "tools": [{"type": "function", "name": "spawn"}]}])
    chat, thinking, spaces = responses_api.chat_request(req)
    msgs = cm.messages(chat)
    assert [m["role"] for m in msgs] == ["system", "system", "user", "assistant", "tool", "tool"]
    assert [c["function"]["name"] for c in msgs[3]["tool_calls"]] == ["exec", "spawn"]  # one answer's calls
    assert msgs[4] == {"role": "tool", "content": "a.txt", "tool_call_id": "c1", "name": "exec"}
    assert msgs[5]["content"] == "ok" and not thinking and spaces == {"spawn": "agents"}
    assert [t["function"]["name"] for t in chat.tools] == ["exec", "spawn"]
    # no max_output_tokens: until the context is full (Codex sends none)
    assert rq.config(Engine(), chat, "chat").max_tokens == Engine.n_ctx - 1
    capped = responses_api.ResponsesRequest(input="x", max_output_tokens=50, reasoning={"effort": "high"})
    chat, thinking, _ = responses_api.chat_request(capped)
    assert rq.config(Engine(), chat, "chat").max_tokens == 50 and thinking


@pytest.mark.parametrize("fields, named", [
    ({"previous_response_id": "resp_1"}, "previous_response_id"),
    ({"tools": [{"type": "local_shell"}]}, "local_shell"),
    ({"input": [{"type": "computer_call_output"}]}, "computer_call_output"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}, "input_file"),
    ({"tool_choice": {"type": "web_search"}}, "tool_choice"),
    # server-side state and stored prompts: nothing is kept here
    ({"conversation": "conv_1"}, "conversation"), ({"conversation": {"id": "conv_1"}}, "conversation"),
    ({"prompt": {"id": "pmpt_1", "version": "2"}}, "prompt"),
    # logprobs are chat completions' here; an include value Tandem does not know
    ({"include": ["message.output_text.logprobs"]}, "include"), ({"include": ["everything"]}, "include"),
    ({"include": "reasoning.encrypted_content"}, "include"),
    ({"top_logprobs": 3}, "top_logprobs"),
    ({"reasoning": {"effort": "ultra"}}, "reasoning.effort"), ({"reasoning": {"summary": "sometimes"}}, "reasoning.summary"),
])
def test_responses_refuse_what_they_cannot_honour_by_name(fields, named):
    with pytest.raises(ApiError, match=named):
        responses_api.chat_request(responses_api.ResponsesRequest(**{"input": "x", **fields}))


@pytest.mark.parametrize("fields", [
    {"include": ["reasoning.encrypted_content"]},  # Codex's: no reasoning is carried between turns here
    {"include": ["web_search_call.action.sources", "file_search_call.results"]},  # hosted tools run nowhere here
    {"service_tier": "auto"}, {"service_tier": "flex"}, {"store": True}, {"top_logprobs": 0},
    {"reasoning": {"effort": "xhigh", "summary": "detailed"}}, {"reasoning": {"effort": "none"}},
])
def test_responses_take_the_hints_that_change_nothing_here(fields):
    responses_api.chat_request(responses_api.ResponsesRequest(**{"input": "x", **fields}))


def test_hosted_tools_are_left_out_and_the_rest_offered():
    """An agent's default hosted tools (Codex's web_search, Claude's web search) do not make a
    400: they are left out of what the model is offered, the route logs and counts them."""
    fn = {"type": "function", "name": "exec", "parameters": FN}
    req = responses_api.ResponsesRequest(input="x", tools=[{"type": "web_search", "external_web_access": False},
                                                           fn, {"type": "file_search_2025"}])
    chat, _, _ = responses_api.chat_request(req)
    assert [t["function"]["name"] for t in chat.tools] == ["exec"]
    assert chat._hosted_left_out == ["web_search", "file_search_2025"]
    req = anthropic_api.MessagesRequest(max_tokens=8, messages=[{"role": "user", "content": "x"}], tools=[
        {"type": "web_search_20250305", "name": "web_search"}, {"name": "Bash", "input_schema": FN}])
    chat, _ = anthropic_api.chat_request(req)
    assert [t["function"]["name"] for t in chat.tools] == ["Bash"]
    assert chat._hosted_left_out == ["web_search_20250305"]
    assert "hosted_left_out" not in chat.model_dump()  # not a field a client sends


def test_anthropic_blocks_become_chat_messages():
    req = anthropic_api.MessagesRequest(max_tokens=32000, system=[
        {"type": "text", "text": "Header"}, {"type": "text", "text": "Rules", "cache_control": {"type": "ephemeral"}}],
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "<reminder>"}, {"type": "text", "text": "Run ls"}]},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": ""},
                                              {"type": "text", "text": "Running."},
                                              {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"cmd": "ls"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "is_error": True,
                                          "content": [{"type": "text", "text": "denied"}]},
                                         {"type": "text", "text": "Try again"}]},
            {"role": "system", "content": "mid-conversation"}],
        tools=[{"name": "Bash", "description": "Run", "input_schema": FN}],
        tool_choice={"type": "any", "disable_parallel_tool_use": True}, thinking={"type": "adaptive"})
    chat, thinking = anthropic_api.chat_request(req)
    msgs = cm.messages(chat)
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool", "user", "system"]
    assert msgs[0]["content"] == "Header\n\nRules" and msgs[1]["content"] == "<reminder>Run ls"
    assert msgs[2]["content"] == "Running." and msgs[2]["tool_calls"][0]["function"]["arguments"] == {"cmd": "ls"}
    assert msgs[3]["content"] == "Error: denied" and msgs[3]["name"] == "Bash"  # the model is told it failed
    assert thinking and chat.tool_choice == "required" and chat.parallel_tool_calls is False
    assert rq.config(Engine(), chat, "chat").max_tokens == Engine.n_ctx - 1  # 32000 is a bound


@pytest.mark.parametrize("fields, named", [
    ({"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]}, "document"),
    ({"tools": [{"type": "bash_20250124", "name": "bash"}]}, "bash_20250124"),
    ({"mcp_servers": [{"type": "url", "url": "http://x"}]}, "mcp_servers"),
    ({"tool_choice": {"type": "tool"}}, "tool_choice"),
    ({"thinking": {"type": "enabled", "budget_tokens": 64}}, "budget_tokens"),
    ({"thinking": {"type": "enabled", "budget_tokens": -5}}, "budget_tokens"),
    ({"thinking": {"type": "enabled", "budget_tokens": "lots"}}, "budget_tokens"),
    ({"container": "container_1"}, "container"),
    ({"tools": [{"name": "f", "description": "no schema"}]}, "input_schema"),

    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "http://x"}}]}]},
     "fetches no URLs"),
])
def test_anthropic_refuses_what_it_cannot_honour_by_name(fields, named):
    req = anthropic_api.MessagesRequest(**{"max_tokens": 32, "messages": [{"role": "user", "content": "x"}], **fields})
    with pytest.raises(ApiError, match=named):
        anthropic_api.chat_request(req)


@pytest.mark.parametrize("fields", [
    {"service_tier": "standard_only"}, {"service_tier": "auto"}, {"metadata": {"user_id": "u"}},
    {"thinking": {"type": "enabled", "budget_tokens": 1024}},
    {"messages": [{"role": "user", "content": "x"},
                  {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}]},
])
def test_anthropic_takes_the_hints_that_change_nothing_here(fields):
    anthropic_api.chat_request(anthropic_api.MessagesRequest(
        **{"max_tokens": 2048, "messages": [{"role": "user", "content": "x"}], **fields}))


USER = {"role": "user", "content": "x"}
FN_CALL = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
TOOL_USE = {"role": "assistant", "content": [{"type": "text", "text": "Let me look."},
                                             {"type": "tool_use", "id": "t1", "name": "f", "input": {}}]}


def _chat(api: str, body):
    """The chat request a route makes of `body` in `api`'s shape."""
    if api == "responses":
        return responses_api.chat_request(responses_api.ResponsesRequest(input=body))[0]
    if api == "anthropic":
        return anthropic_api.chat_request(anthropic_api.MessagesRequest(max_tokens=32, messages=body))[0]
    return rq.ChatRequest(messages=body)


@pytest.mark.parametrize("api, body, param", [
    # a call left without its result (OpenAI's, Anthropic's and the Responses API's own 400)
    ("chat", [USER, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}, USER], "messages[1].tool_calls[0]"),
    ("responses", [USER, FN_CALL, USER], "input[1]"), ("responses", [USER, FN_CALL], "input[1]"),
    ("anthropic", [USER, TOOL_USE, USER], "messages[1].content[1]"), ("anthropic", [USER, TOOL_USE], "messages[1].content[1]"),
    # the translated request's refusals name the client's own fields, not the chat messages made of them
    ("responses", [{"role": "bogus", "content": "x"}], "input[0].role"),
    ("responses", [USER, {**FN_CALL, "arguments": "{not json"}, {"type": "function_call_output", "call_id": "c1",
                                                                  "output": "ok"}], "input[1]"),
    ("responses", [USER, FN_CALL, {"type": "function_call_output", "call_id": "c9", "output": "ok"}], "input[2].call_id"),
    ("anthropic", [USER, TOOL_USE, {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t9",
                                                                "content": "ok"}]}], "messages[2].content[0].tool_use_id"),
])
def test_refusals_name_the_field_the_client_wrote(api, body, param):
    with pytest.raises(ApiError) as refused:
        cm.messages(_chat(api, body))
    assert refused.value.param == param and param in refused.value.message, refused.value.message
    assert "messages[" not in refused.value.message or api != "responses"


@pytest.mark.parametrize("field, value", [("continue_final_message", True), ("add_generation_prompt", False)])
def test_llama_servers_ways_to_continue_a_message_are_refused_by_name(field, value):
    req = rq.ChatRequest(messages=[{"role": "user", "content": "x"}, {"role": "assistant", "content": "Wh"}],
                         **{field: value})
    with pytest.raises(ApiError, match=field):
        cm.messages(req)


def test_reply_shapes_send_null_where_the_apis_do_and_leave_out_what_does_not_apply():
    def wire(model) -> dict:
        return json.loads(model.model_dump_json())

    head = dict(id="chatcmpl-1", object="chat.completion.chunk", created=1, model="g", system_fingerprint="t")
    first = wire(oa.Chunk(**head, choices=[oa.ChunkChoice(index=0, delta=oa.RoleDelta())]))
    assert first["choices"] == [{"index": 0, "delta": {"role": "assistant", "content": None}, "logprobs": None,
                                 "finish_reason": None}]  # who speaks, content null, as OpenAI's first chunk
    assert "usage" not in first and "timings" not in first
    call = oa.ToolCallDelta(index=0, function=oa.FunctionDelta(arguments='{"a": 1}'))
    later = wire(oa.ChunkChoice(index=1, delta=oa.Delta(tool_calls=[call])))
    assert later["delta"] == {"tool_calls": [{"index": 0, "function": {"arguments": '{"a": 1}'}}]}
    message = wire(oa.Message(content=None, tool_calls=[oa.ToolCall(id="c", function=oa.Function(name="f",
                                                                                               arguments="{}"))]))
    assert message == {"role": "assistant", "content": None,
                       "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}
    with pytest.raises(ValueError):  # a misspelt field is an error, not a field dropped
        oa.Delta(contents="x")

    use = an.ToolUseBlock(id="toolu_1", name="Bash", input={"cmd": "ls"})
    reply = wire(an.Message(id="msg_1", model="g", content=[an.ThinkingBlock(thinking="hm"), use],
                            stop_reason="tool_use", stop_sequence=None,
                            usage=an.Usage(input_tokens=5, output_tokens=3, cache_read_input_tokens=2)))
    assert reply["content"] == [{"type": "thinking", "thinking": "hm", "signature": ""},
                                {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"cmd": "ls"}}]
    assert reply["stop_sequence"] is None and "timings" not in reply  # llama-server's only when asked
    assert reply["usage"]["cache_creation_input_tokens"] == 0
    assert wire(an.ContentBlockDelta(index=1, delta=an.InputJsonDelta(partial_json="{}"))) == {
        "type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{}"}}

    item = rs.FunctionCallItem(id="fc_1", status="completed", call_id="c1", name="exec", arguments="{}")
    assert wire(item) == {"id": "fc_1", "type": "function_call", "status": "completed", "call_id": "c1",
                          "name": "exec", "arguments": "{}"}  # no namespace unless declared in one
    spaced = wire(item.model_copy(update={"namespace": "agents"}))
    assert spaced["namespace"] == "agents"
    event = wire(rs.OutputItemEvent(type="response.output_item.done", sequence_number=7, output_index=0, item=item))
    assert event["sequence_number"] == 7 and event["item"]["call_id"] == "c1" and "timings" not in event
    started = wire(rs.Response(id="resp_1", created_at=1, model="g", status="in_progress", incomplete_details=None,
                               error=None, instructions=None, max_output_tokens=None, output=[],
                               parallel_tool_calls=True, tool_choice="auto", tools=[], temperature=None, top_p=None,
                               text={"format": {"type": "text"}}, reasoning=None, usage=None))
    assert started["usage"] is None and started["error"] is None and started["store"] is False
    assert "timings" not in started and started["truncation"] == "disabled"
