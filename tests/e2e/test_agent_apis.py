"""The APIs coding agents speak, through a real `tandem serve` (the tiny pair with Gemma 4's real
template) and the real clients: Anthropic's Messages API with the anthropic SDK (what Claude
Code is built on), OpenAI's Responses API with the openai SDK and the OpenAI Agents SDK in its
default (Responses) mode (in test_tools.py, beside its chat completions mode), and
llama-server's own routes that llama.cpp-aware clients use."""

from __future__ import annotations

import http.client
import json
from urllib.parse import urlsplit

import anthropic
import httpx2 as httpx
import jsonschema
import openai
import pytest

from ..support.tool_schemas import WEATHER
from ..support.waiting import wait_until

TOOL = {"name": "get_weather", "description": "The weather of a city", "input_schema": WEATHER}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def server(tools_server):
    return tools_server


def claude(server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url.removesuffix("/v1"), api_key="none", max_retries=0, timeout=120)


def oai(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url, api_key="none", max_retries=0, timeout=120)


# ---- Anthropic Messages ---------------------------------------------------------------------
def test_messages_whole_and_streamed_give_the_same_text_with_anthropics_events(server):
    c = claude(server)
    kw = dict(model="gemma-4", max_tokens=24, system=[{"type": "text", "text": "Be brief."}], messages=ASK)
    whole = c.messages.create(**kw)
    assert whole.type == "message" and whole.role == "assistant" and whole.stop_reason == "max_tokens"
    assert [b.type for b in whole.content] == ["text"] and whole.usage.output_tokens == 24
    events = []
    with c.messages.stream(**kw) as s:
        for ev in s:
            events.append(ev)
        streamed = s.get_final_message()
    assert streamed.content[0].text == whole.content[0].text  # greedy: the same reply
    kinds = [e.type for e in events]
    start = events[0].message.usage  # the prompt is counted before any text, as llama-server's test asks
    assert start.input_tokens + start.cache_read_input_tokens == whole.usage.input_tokens + whole.usage.cache_read_input_tokens
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and "message_delta" in kinds
    starts = [e.index for e in events if e.type == "content_block_start"]
    stops = [e.index for e in events if e.type == "content_block_stop"]
    assert starts == stops == [0]
    assert streamed.stop_reason == "max_tokens" and streamed.usage.output_tokens == 24
    assert "timings" not in whole.model_extra  # not Anthropic's; llama-server's only when asked, with drafts
    asked = c.messages.create(**kw, extra_body={"timings_per_token": True}).model_extra["timings"]
    assert asked["predicted_n"] == 24 and asked["draft_n"] > 0
    # the prompt as count_tokens sees it is the prompt the reply was made from
    n = c.messages.count_tokens(model="gemma-4", system=kw["system"], messages=ASK).input_tokens
    assert n == whole.usage.input_tokens + whole.usage.cache_read_input_tokens
    # a stop sequence ends the text where it begins and is named
    cut = whole.content[0].text[6:10]
    stopped = c.messages.create(**{**kw, "stop_sequences": [cut]})
    assert stopped.stop_reason == "stop_sequence" and stopped.stop_sequence == cut
    assert stopped.content[0].text == whole.content[0].text[:whole.content[0].text.find(cut)]


def test_a_forced_tool_call_and_its_result_go_round_whole_and_streamed(server):
    c = claude(server)
    kw = dict(model="gemma-4", max_tokens=200, messages=ASK, tools=[TOOL])
    forced = c.messages.create(**kw, tool_choice={"type": "tool", "name": "get_weather"})
    assert forced.stop_reason == "tool_use"
    use = forced.content[-1]
    assert use.type == "tool_use" and use.name == "get_weather"
    jsonschema.validate(use.input, WEATHER)
    with c.messages.stream(**kw, tool_choice={"type": "any"}) as s:
        kinds = [(e.type, e.delta.type if e.type == "content_block_delta" else None) for e in s]
        streamed = s.get_final_message()
    assert ("content_block_delta", "input_json_delta") in kinds and streamed.stop_reason == "tool_use"
    assert streamed.content[-1].input == use.input
    # the result goes back (an error too, which the model is told); Claude Code's tolerated extras
    for is_error in (False, True):
        after = c.messages.create(model="gemma-4", max_tokens=8, tools=[TOOL], metadata={"user_id": "u"}, messages=[
            *ASK, {"role": "assistant", "content": [use.model_dump(exclude_none=True)]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny",
                                          "is_error": is_error, "cache_control": {"type": "ephemeral"}}]},
            {"role": "system", "content": "A reminder mid-conversation."}],
            extra_body={"context_management": {"edits": []}, "output_config": {"effort": "high"}},
            thinking={"type": "adaptive"})
        assert after.stop_reason == "max_tokens" and after.usage.output_tokens == 8


def test_messages_refuse_what_they_cannot_honour_in_anthropics_error_shape(server):
    c = claude(server)
    with pytest.raises(anthropic.BadRequestError, match="document") as e:
        c.messages.create(model="g", max_tokens=5, messages=[{"role": "user", "content": [
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}}]}])
    assert e.value.body["type"] == "error" and e.value.body["error"]["type"] == "invalid_request_error"
    # a server tool Anthropic runs is left out (and counted), not refused
    before = _left_out(server)
    r = c.messages.create(model="g", max_tokens=5, messages=ASK,
                          tools=[{"type": "web_search_20250305", "name": "web_search"}])
    assert r.usage.output_tokens >= 1 and _left_out(server) == before + 1
    with pytest.raises(anthropic.BadRequestError, match="projector"):  # no picture reader loaded
        c.messages.create(model="g", max_tokens=5, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": _PNG}}]}])
    r = httpx.post(server.url + "/messages", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["type"] == "error"
    # a conversation longer than the context, in Anthropic's words (Claude Code compacts on them)
    with pytest.raises(anthropic.BadRequestError, match=r"prompt is too long: \d+ tokens > 8192 maximum"):
        c.messages.create(model="g", max_tokens=5, messages=[{"role": "user", "content": "word " * 9000}])


# a 1x1 PNG
_PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")


# ---- OpenAI Responses -----------------------------------------------------------------------
def test_responses_whole_streamed_and_a_function_call_round_trip(server):
    c = oai(server)
    whole = c.responses.create(model="g", instructions="Be brief.", input="Hello there", max_output_tokens=16)
    assert whole.id.startswith("resp_") and whole.output[0].id.startswith("msg_")
    assert whole.status == "incomplete" and whole.incomplete_details.reason == "max_output_tokens"
    assert whole.usage.output_tokens == 16 and whole.output_text
    text, types, done, numbers = "", [], None, []
    for ev in c.responses.create(model="g", instructions="Be brief.", input=[{"role": "user", "content": "Hello there"}],
                                 max_output_tokens=16, stream=True):
        types.append(ev.type)
        numbers.append(ev.sequence_number)
        text += ev.delta if ev.type == "response.output_text.delta" else ""
        done = ev.response if ev.type in ("response.completed", "response.incomplete") else done
    assert types[:2] == ["response.created", "response.in_progress"] and types[-1] == "response.incomplete"
    assert text == done.output_text == whole.output_text
    assert numbers == list(range(1, len(numbers) + 1))
    tools = [{"type": "function", "name": "get_weather", "description": "The weather", "parameters": WEATHER}]
    called = c.responses.create(model="g", input="Weather?", tools=tools, tool_choice="required", max_output_tokens=200)
    call = called.output[-1]
    assert call.type == "function_call" and call.name == "get_weather" and called.status == "completed"
    jsonschema.validate(json.loads(call.arguments), WEATHER)
    kinds = [ev.type for ev in c.responses.create(model="g", input="Weather?", tools=tools, tool_choice="required",
                                                  max_output_tokens=200, stream=True)]
    assert "response.function_call_arguments.delta" in kinds and kinds[-1] == "response.completed"
    after = c.responses.create(model="g", tools=tools, max_output_tokens=8, store=False, input=[
        {"role": "developer", "content": "Use tools."}, {"role": "user", "content": "Weather?"},
        call.model_dump(exclude_none=True), {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}])
    assert after.usage.input_tokens > whole.usage.input_tokens and after.store is False
    assert c.responses.input_tokens.count(model="g", input="Hello there").input_tokens > 0


def test_responses_refuse_state_and_foreign_tools_by_name(server):
    c = oai(server)
    with pytest.raises(openai.BadRequestError, match="previous_response_id"):
        c.responses.create(model="g", input="x", previous_response_id="resp_1")
    with pytest.raises(openai.BadRequestError, match="local_shell"):
        c.responses.create(model="g", input="x", tools=[{"type": "local_shell"}])
    # Codex's default hosted tool: left out, the request answered (Codex needs no config for it)
    before = _left_out(server)
    r = c.responses.create(model="g", input="x", max_output_tokens=4,
                           tools=[{"type": "web_search", "external_web_access": False}, WEATHER_FN])
    assert r.usage.output_tokens >= 1 and _left_out(server) == before + 1


def _left_out(server) -> int:
    """tandem:hosted_tools_left_out_total from the server's /metrics."""
    text = httpx.get(server.url.removesuffix("/v1") + "/metrics").text
    return int(next(x.split()[-1] for x in text.splitlines() if x.startswith("tandem:hosted_tools_left_out_total")))


WEATHER_FN = {"type": "function", "name": "get_weather", "description": "The weather", "parameters": WEATHER}


def test_responses_truncation_auto_drops_the_oldest_turns_and_disabled_refuses(server):
    """OpenAI's truncation "auto": the oldest items go until the prompt fits with room for the
    reply; a call stays with its output, the developer message stays. It used to be ignored
    (an overflow answered 400 whatever the client asked for)."""
    c = oai(server)
    long_ago = [{"role": "developer", "content": "Be brief."}]
    for i in range(12):  # ~12 x 1000 tokens: more than the context's 8192
        long_ago += [{"role": "user", "content": f"turn {i}: " + "word " * 500},
                     {"type": "function_call", "call_id": f"c{i}", "name": "get_weather", "arguments": "{}"},
                     {"type": "function_call_output", "call_id": f"c{i}", "output": "sunny " * 500}]
    ask = long_ago + [{"role": "user", "content": "And now?"}]
    with pytest.raises(openai.BadRequestError, match="context"):
        c.responses.create(model="g", input=ask, max_output_tokens=4, tools=[WEATHER_FN])
    r = c.responses.create(model="g", input=ask, max_output_tokens=4, tools=[WEATHER_FN], truncation="auto")
    assert r.status == "incomplete" and r.truncation == "auto"
    assert 8192 // 2 < r.usage.input_tokens <= 8192 - 8192 // 4  # room for the reply; not more dropped than needed
    counted = c.responses.input_tokens.count(model="g", input=ask, tools=[WEATHER_FN], truncation="auto")
    assert counted.input_tokens == r.usage.input_tokens


# ---- llama-server's routes ------------------------------------------------------------------
def test_llama_server_routes_and_extensions(server):
    base = server.url.removesuffix("/v1")
    post = lambda path, body: httpx.post(base + path, json=body, timeout=60)  # noqa: E731
    listed = httpx.get(base + "/models").json()["data"][0]
    assert listed["aliases"] == [listed["id"]] and listed["tags"] == []
    toks = post("/tokenize", {"content": "Hello world", "with_pieces": True}).json()["tokens"]
    assert "".join(t["piece"] for t in toks).strip() == "Hello world"  # as SentencePiece: a space before
    assert post("/detokenize", {"tokens": [t["id"] for t in toks]}).json()["content"].strip() == "Hello world"
    assert post("/detokenize", {"tokens": [10**9]}).status_code == 400
    prompt = post("/apply-template", {"messages": ASK}).json()["prompt"]
    assert "<|turn>user\nWhat is the weather in Paris?<turn|>\n<|turn>model\n" in prompt
    n = post("/v1/chat/completions/input_tokens", {"messages": ASK}).json()["input_tokens"]
    r = post("/chat/completions", {"messages": ASK, "max_tokens": 4})  # unprefixed, as llama.cpp's tests use
    body = r.json()
    assert body["usage"]["prompt_tokens"] == n and body["system_fingerprint"].startswith("tandem-")
    assert body["usage"]["prompt_tokens_details"]["cached_tokens"] >= 0
    props = httpx.get(base + "/props").json()
    assert props["default_generation_settings"]["n_ctx"] == 8192 and "<|turn>" in props["chat_template"]
    assert props["modalities"]["vision"] is False and props["tandem"]["mtp"] is True
    # a drafter without cluster centroids: its full head, every token scored
    assert props["tandem"]["draft_head"] == {"head": "full", "tokens_scored": props["tandem"]["draft_head"]["vocabulary"],
                                             "vocabulary": props["tandem"]["draft_head"]["vocabulary"], "clusters": 0,
                                             "clusters_scored": 0}
    assert props["model_path"] == "tiny-custom-target.gguf"  # the file, not the folders it sits in
    memory = props["tandem"]["memory"]  # the plan and llama.cpp's own buffers, part by part
    assert memory["planned"]["kv_cache"] > 0 and memory["allocated"]["weights"] > 0
    assert memory["planned"]["total"] == sum(v for k, v in memory["planned"].items() if k != "total")
    metrics = httpx.get(base + "/metrics").text
    assert 'tandem:requests_total{api="chat"}' in metrics and "llamacpp:tokens_predicted_total" in metrics
    drafted = [float(line.split()[-1]) for line in metrics.splitlines() if line.startswith('tandem:draft_tokens_total{source="mtp"}')]
    assert drafted and drafted[0] > 0  # the drafter drafted for these requests
    # a stream's first chunk names the role with no content yet
    with httpx.stream("POST", base + "/v1/chat/completions", json={"messages": ASK, "max_tokens": 4, "stream": True},
                      timeout=60) as s:
        first = json.loads(next(line for line in s.iter_lines() if line.startswith("data:"))[5:])
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": None}


def test_llama_servers_native_completion(server):
    base = server.url.removesuffix("/v1")
    oai_text = oai(server).completions.create(model="g", prompt="a b c d", max_tokens=8).choices[0].text
    whole = httpx.post(base + "/completion", json={"prompt": "a b c d", "n_predict": 8}, timeout=60).json()
    assert whole["content"] == oai_text and whole["tokens_predicted"] == 8 and whole["stop_type"] == "limit"
    assert whole["tokens_evaluated"] > 0 and whole["timings"]["predicted_n"] == 8 and whole["stop"] is True
    assert whole["generation_settings"]["n_predict"] == 8 and whole["has_new_line"] == ("\n" in whole["content"])
    ids = httpx.post(base + "/tokenize", json={"content": "a b c d", "add_special": True}).json()["tokens"]
    by_ids = httpx.post(base + "/completions", json={"prompt": ids, "n_predict": 8}, timeout=60).json()
    assert by_ids["content"] == oai_text  # the unprefixed path is the native one, as llama-server's
    chunks = []
    with httpx.stream("POST", base + "/completion", json={"prompt": "a b c d", "n_predict": 8, "stream": True,
                                                          "stop": [oai_text[3:6]]}, timeout=60) as s:
        chunks = [json.loads(line[5:]) for line in s.iter_lines() if line.startswith("data:")]
    assert chunks[-1]["stop"] and chunks[-1]["stop_type"] == "word" and chunks[-1]["stopping_word"] == oai_text[3:6]
    assert "".join(c["content"] for c in chunks) == oai_text[:3]
    refused = httpx.post(base + "/completion", json={"prompt": "x", "mirostat": 2}, timeout=60)
    err = refused.json()["error"]  # llama-server's shape: the status as the code
    assert refused.status_code == 400 and err["param"] == "mirostat" and err["code"] == 400
    assert err["type"] == "invalid_request_error" and "mirostat" in err["message"]


def test_native_completion_probabilities_tokens_and_batches_as_llama_servers(server):
    base = server.url.removesuffix("/v1")
    post = lambda body: httpx.post(base + "/completion", json={"n_predict": 5, **body}, timeout=60)  # noqa: E731
    whole = post({"prompt": "a b c d", "n_probs": 3, "return_tokens": True}).json()
    probs = whole["completion_probabilities"]
    assert [p["id"] for p in probs] == whole["tokens"] and len(whole["tokens"]) == 5
    for p in probs:  # llama-server's shape: the token, its id, bytes and log-probability, and the best 3
        assert p["token"] == bytes(p["bytes"]).decode("utf-8", "replace") and p["logprob"] <= 0
        assert len(p["top_logprobs"]) == 3 and p["top_logprobs"][0]["logprob"] >= p["logprob"]
        assert all(set(t) == {"id", "token", "bytes", "logprob"} for t in p["top_logprobs"])
    assert post({"prompt": "a b c d"}).json()["tokens"] == []  # only with return_tokens
    aliased = post({"prompt": "a b c d", "logprobs": 2}).json()["completion_probabilities"]  # n_probs' other name
    assert [len(p["top_logprobs"]) for p in aliased] == [2] * 5
    # streamed: a chunk per token, each with its id (and probabilities), the same text and tokens
    with httpx.stream("POST", base + "/completion", timeout=60, json={
            "prompt": "a b c d", "n_predict": 5, "n_probs": 3, "stream": True}) as s:
        chunks = [json.loads(line[5:]) for line in s.iter_lines() if line.startswith("data:")]
    parts = [c for c in chunks if not c["stop"]]
    assert [c["tokens"][0] for c in parts] == whole["tokens"] and all(len(c["tokens"]) == 1 for c in parts)
    assert [c["completion_probabilities"][0]["id"] for c in parts] == whole["tokens"]
    assert "".join(c["content"] for c in chunks) == whole["content"]
    assert chunks[-1]["stop"] and "completion_probabilities" not in chunks[-1]
    # the prompt forms llama-server takes: ids and text mixed, {"prompt_string"}, and a batch of them
    ids = httpx.post(base + "/tokenize", json={"content": "a b c d", "add_special": True}).json()["tokens"]
    batch = post({"prompt": [ids, "a b c d", {"prompt_string": "a b c d"}, [ids[0], "a b c d"]]}).json()
    assert [r["index"] for r in batch] == [0, 1, 2, 3]
    assert {r["content"] for r in batch} == {whole["content"]}  # ids[0] is BOS: the same prompt each time
    assert post({"prompt": {"prompt_string": "x", "multimodal_data": [_PNG]}}).status_code == 400
    assert post({"prompt": [[10**9]]}).status_code == 400
    # only the fields asked for, a/b naming b inside a
    picked = post({"prompt": "a b c d", "response_fields": ["content", "generation_settings/n_predict"]}).json()
    assert picked == {"content": whole["content"], "generation_settings/n_predict": 5}


def test_native_completion_sampling_as_llama_server_takes_it(server):
    base = server.url.removesuffix("/v1")
    def post(body):
        return httpx.post(base + "/completion", json={"prompt": "a b c d", "n_predict": 8, **body}, timeout=60)
    plain = post({}).json()
    assert "completion_probabilities" not in plain and plain["generation_settings"]["logit_bias"] == []
    # logit_bias by token text (each of its tokens), by id, and false (a ban), in both of llama-server's forms
    word = plain["content"][:2]
    banned = httpx.post(base + "/tokenize", json={"content": word}).json()["tokens"]
    for bias, said in (([[word, -100]], -100.0), ({word: -100}, -100.0), ([[banned[0], False]], None),
                       ({str(banned[0]): -100}, -100.0)):
        r = post({"logit_bias": bias, "return_tokens": True}).json()
        assert banned[0] not in r["tokens"], bias
        assert {"bias": said, "token": banned[0]} in r["generation_settings"]["logit_bias"]  # a ban: -inf, null
    # ignore_eos bans the end-of-generation tokens (-inf, null in JSON): the reply runs to n_predict
    eos = post({"ignore_eos": True}).json()
    assert eos["generation_settings"]["ignore_eos"] and eos["generation_settings"]["logit_bias"]
    assert all(b["bias"] is None for b in eos["generation_settings"]["logit_bias"])
    assert eos["tokens_predicted"] == 8 and eos["stop_type"] == "limit"
    # samplers: the ones left out are off; an order Tandem does not apply is refused
    kept = post({"samplers": ["penalties", "top_k", "temperature"], "temperature": 0.7, "top_p": 0.5, "seed": 1})
    settings = kept.json()["generation_settings"]
    assert settings["top_p"] == 1.0 and settings["temperature"] == 0.7
    assert post({"samplers": "edkypmxt"}).status_code == 200  # llama-server's default chain, as letters
    for body, param in (({"samplers": ["top_p", "top_k", "temperature"]}, "samplers"), ({"mirostat": 1}, "mirostat"),
                        ({"typical_p": 0.5}, "typical_p"), ({"post_sampling_probs": True}, "post_sampling_probs"),
                        ({"return_progress": True}, "return_progress"), ({"n_probs": 99}, "n_probs"),
                        ({"n_predict": 0}, "n_predict"), ({"logit_bias": [[1, "x"]]}, "logit_bias")):
        r = post(body)
        assert r.status_code == 400 and r.json()["error"]["param"] == param, body
    assert post({"mirostat": 0, "typical_p": 1.0, "dry_multiplier": 0, "n_keep": 4}).status_code == 200  # "off"
    # repeat_last_n and the penalty it bounds are honoured
    assert post({"repeat_penalty": 1.5, "repeat_last_n": 8}).json()["generation_settings"]["repeat_last_n"] == 8


def test_llama_servers_slots_and_metrics_as_its_clients_read_them(server):
    base = server.url.removesuffix("/v1")
    slots = httpx.get(base + "/slots").json()
    assert len(slots) == httpx.get(base + "/props").json()["total_slots"]
    assert all(s["is_processing"] is False and s["n_ctx"] == 8192 for s in slots)
    with httpx.stream("POST", base + "/completion", timeout=60, json={"prompt": "a b", "n_predict": 4000,
                                                                      "ignore_eos": True, "stream": True}) as s:
        lines = s.iter_lines()  # held: a dropped iterator would close the connection (and so the generation)
        next(line for line in lines if line.startswith("data:"))  # it generates: its slot is busy
        busy = [x for x in httpx.get(base + "/slots").json() if x["is_processing"]]
        assert len(busy) == 1 and sum(busy[0]["next_token"][0][k] for k in ("n_decoded", "n_remain")) == 4000
    wait_until(lambda: not any(x["is_processing"] for x in httpx.get(base + "/slots").json()), 10,
               "the slot of the client that went away to be free again")
    # the header as llama-server spells it (its tests look it up in a plain dict), and per-token times
    conn = http.client.HTTPConnection(urlsplit(base).netloc, timeout=10)
    conn.request("GET", "/metrics")
    assert "Process-Start-Time-Unix" in dict(conn.getresponse().getheaders())
    conn.close()
    t = httpx.post(base + "/completion", json={"prompt": "a b c", "n_predict": 6}, timeout=60).json()["timings"]
    assert t["predicted_per_token_ms"] == pytest.approx(t["predicted_ms"] / 5)  # the first token comes with the prompt
    assert t["prompt_per_token_ms"] == pytest.approx(t["prompt_ms"] / t["prompt_n"])
    # llama-server's decode counters: calls of the model, the longest sequence, drafts, busy sequences
    text = httpx.get(base + "/metrics").text
    for name, kind in (("n_decode_total", "counter"), ("n_tokens_max", "counter"),
                       ("spec_decode_num_drafts_total", "counter"), ("n_busy_slots_per_decode", "gauge")):
        assert f"# HELP llamacpp:{name} " in text and f"# TYPE llamacpp:{name} {kind}" in text, name
    value = {ln.split()[0]: float(ln.split()[1]) for ln in text.splitlines() if ln.startswith("llamacpp:")}
    assert value["llamacpp:n_decode_total"] > 0 and value["llamacpp:spec_decode_num_drafts_total"] > 0
    assert value["llamacpp:n_tokens_max"] >= t["prompt_n"] + 6 and value["llamacpp:n_busy_slots_per_decode"] >= 1


def test_grammar_and_json_schema_extensions_are_honoured_and_checked(server):
    c = oai(server)
    yes_no = c.chat.completions.create(model="g", messages=ASK, max_tokens=8,
                                       extra_body={"grammar": 'root ::= "yes" | "no"'})
    assert yes_no.choices[0].message.content in ("yes", "no")
    # closed: an open object lets the random test model write extra keys until max_tokens
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    js = c.chat.completions.create(model="g", messages=ASK, max_tokens=40, extra_body={"json_schema": schema})
    jsonschema.validate(json.loads(js.choices[0].message.content), schema)
    obj = c.chat.completions.create(model="g", messages=ASK, max_tokens=40,
                                    response_format={"type": "json_object", "schema": schema})
    jsonschema.validate(json.loads(obj.choices[0].message.content), schema)
    with pytest.raises(openai.BadRequestError, match="grammar"):
        c.chat.completions.create(model="g", messages=ASK, max_tokens=8, extra_body={"grammar": "root ::= ("})
    with pytest.raises(openai.BadRequestError, match="give one"):
        c.chat.completions.create(model="g", messages=ASK, max_tokens=8,
                                  extra_body={"grammar": 'root ::= "a"', "json_schema": schema})


def test_a_prompt_over_the_context_says_its_size_as_llama_server_does(server):
    r = httpx.post(server.url + "/chat/completions", timeout=120, json={
        "messages": [{"role": "user", "content": "word " * 9000}], "max_tokens": 4})
    err = r.json()["error"]
    assert r.status_code == 400 and err["type"] == "exceed_context_size_error"
    assert err["n_ctx"] == 8192 and err["n_prompt_tokens"] > 8192


def test_earlier_thinking_reaches_the_template_as_the_messages_reasoning(server):
    """Anthropic's thinking blocks and OpenAI's reasoning_content of an earlier assistant turn are
    the message's reasoning, as llama-server maps them; the model's template decides what it shows
    (Gemma 4's: the thinking of tool-calling turns since the last user message)."""
    base = server.url.removesuffix("/v1")
    use = {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}}
    def count(blocks):
        return claude(server).messages.count_tokens(model="g", tools=[TOOL], messages=[
            ASK[0], {"role": "assistant", "content": blocks},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "sunny"}]}],
        ).input_tokens
    thought = {"type": "thinking", "thinking": "I should look the weather up first.", "signature": "x"}
    assert count([thought, use]) > count([use])
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    prompt = httpx.post(base + "/apply-template", timeout=60, json={"messages": [
        ASK[0], {"role": "assistant", "content": "", "reasoning_content": "Look it up.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]}).json()["prompt"]
    assert "<|channel>thought\nLook it up.\n<channel|>" in prompt


def test_debug_dumps_and_prompt_progress_are_refused_by_name(server):
    base = server.url.removesuffix("/v1")
    for path, body in (("/chat/completions", {"messages": ASK, "max_tokens": 2}),
                       ("/v1/completions", {"prompt": "a", "max_tokens": 2}),
                       ("/v1/responses", {"input": "a", "max_output_tokens": 2}),
                       ("/v1/messages", {"messages": ASK, "max_tokens": 2})):
        for field in ("verbose", "return_progress"):
            r = httpx.post(base + path, json={**body, field: True}, timeout=60)
            assert r.status_code == 400 and field in r.text, (path, field)
        assert httpx.post(base + path, json={**body, "verbose": False}, timeout=60).status_code == 200


def test_serve_on_several_addresses_with_aliases_and_tags(gemma4_tools):
    """llama-server's --host a,b, --alias and --tags: tandem serve --host, --name and --tags take
    several; /v1/models names the first name as the id and lists every name and tag."""
    import socket

    from ..support.serve import Serve

    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback")
    s = Serve(gemma4_tools, "--host", "127.0.0.1", "::1", "--name", "code", "fim", "--tags", "chat", "small",
              drafter=False)
    try:
        for host in ("127.0.0.1", "[::1]"):
            listed = httpx.get(f"http://{host}:{s.port}/v1/models", timeout=10).json()["data"][0]
            assert listed["id"] == "code" and listed["aliases"] == ["code", "fim"]
            assert listed["tags"] == ["chat", "small"]
    finally:
        s.stop()
