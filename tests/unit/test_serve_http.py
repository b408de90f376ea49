"""The server's HTTP layer without a model (FastAPI's test client over the real app; no engine is
loaded, so requests that pass the middlewares end in the API's 503 "No model is loaded"): keys
as OpenAI's and Anthropic's clients send them, browser origins as --cors allows them, and errors
in the shape of the API that was asked."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from engine.serve import ServerState, create_app
from engine.serve.http import Origins


def client(key=None, cors=None) -> TestClient:
    return TestClient(create_app(ServerState(lambda: None, "gemma-4", api_key=key), cors), base_url="http://127.0.0.1")


def test_the_key_is_taken_as_a_bearer_token_or_as_x_api_key_and_refused_in_each_apis_shape():
    c = client(key="sekret")
    assert c.get("/health").status_code == 200  # no key needed
    # ...but what the server is doing (the last request's tokens and drafts) only with it
    assert c.get("/health").json() == {"status": "no model loaded"}
    assert "last" in c.get("/health", headers={"x-api-key": "sekret"}).json()
    assert "last" in client().get("/health").json()  # no key set: as before
    for headers in ({"Authorization": "Bearer sekret"}, {"x-api-key": "sekret"}):
        assert c.post("/v1/messages", json={"max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
                      headers=headers).status_code == 503  # past the key: no model here
    wrong = c.post("/v1/messages", json={}, headers={"x-api-key": "nope"})
    assert wrong.status_code == 401 and wrong.json() == {"type": "error", "error": {
        "type": "authentication_error", "message": wrong.json()["error"]["message"]}}
    openai_shape = c.post("/v1/responses", json={}, headers={"Authorization": "Bearer nope"})
    assert openai_shape.status_code == 401 and openai_shape.json()["error"]["code"] == "invalid_api_key"


@pytest.mark.parametrize("cors, origin, allowed", [
    (None, "http://localhost:5173", False),
    (["http://example.com"], "http://example.com", True),
    (["http://example.com"], "http://evil.example", False),
    (["http://a.test", "http://b.test"], "http://b.test", True),
    (["*"], "http://anywhere.test", True),
    (["localhost"], "http://localhost:5173", True),
    (["localhost"], "http://127.0.0.1:8000", True),
    (["localhost"], "http://[::1]:3000", True),
    (["localhost"], "http://localhost.evil.test", False),
])
def test_cors_allows_the_origins_it_was_given(cors, origin, allowed):
    c = client(cors=cors)
    r = c.get("/v1/models", headers={"Origin": origin})
    assert (r.status_code == 200) == allowed, r.text
    if allowed:
        assert r.headers["access-control-allow-origin"] in (origin, "*")
        pre = c.options("/v1/messages", headers={"Origin": origin, "Access-Control-Request-Method": "POST",
                                                 "Access-Control-Request-Headers": "x-api-key,anthropic-version"})
        assert pre.status_code == 200
    else:
        assert r.json()["error"]["code"] == "origin_not_allowed"
    assert Origins(cors).allows(origin) == allowed


def test_malformed_bodies_get_their_apis_error_shape():
    c = client()
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        r = c.post(path, content=b"{not json", headers={"content-type": "application/json"})
        assert r.status_code == 400 and r.json()["type"] == "error" and "not valid JSON" in r.json()["error"]["message"]
    for path in ("/v1/responses", "/v1/chat/completions", "/chat/completions", "/tokenize"):
        r = c.post(path, content=b"{not json", headers={"content-type": "application/json"})
        assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"], path
    missing = c.post("/v1/messages", json={"messages": [{"role": "user", "content": "hi"}]})
    assert missing.status_code == 400 and "max_tokens" in missing.json()["error"]["message"]
    too_big = c.post("/v1/messages", content=b"x" * (5 * 2**20), headers={"content-type": "application/json"})
    assert too_big.status_code == 413 and too_big.json()["error"]["type"] == "request_too_large"
    assert c.get("/v1/nothing").json()["error"]["code"] == "not_found"
    assert c.get("/v1/messages/nothing").json()["error"]["type"] == "not_found_error"


def test_refusals_are_logged_with_the_api_they_came_through():
    seen = []
    c = TestClient(create_app(ServerState(lambda: None, "gemma-4", on_log=seen.append)), base_url="http://127.0.0.1")
    c.post("/v1/messages", json={"messages": []})
    c.post("/v1/responses", content=b"{", headers={"content-type": "application/json"})
    from engine.serve.admission import log_line

    lines = [log_line(e) for e in seen]
    assert lines == ["Anthropic messages: 400: max_tokens: Field required",
                     "OpenAI responses: 400: Invalid request: body: the body is not valid JSON"]


def test_a_body_that_does_not_arrive_in_time_is_a_408_in_the_apis_shape():
    """A client that sends its headers and then a byte now and then holds no connection for ever."""
    import asyncio

    from engine.serve.http import BodyLimit

    async def reached(scope, receive, send):
        raise AssertionError("the application saw a body that never arrived")

    async def trickle():  # the first bytes of a body, then nothing more
        trickle.calls = getattr(trickle, "calls", 0) + 1
        if trickle.calls == 1:
            return {"type": "http.request", "body": b'{"mess', "more_body": True}
        await asyncio.sleep(3600)

    sent = []

    async def send(message):
        sent.append(message)

    for path, shape in (("/v1/chat/completions", lambda b: b["error"]["code"] == "request_timeout"),
                        ("/v1/messages", lambda b: b["error"]["type"] == "timeout_error")):
        sent.clear()
        trickle.calls = 0
        scope = {"type": "http", "path": path, "headers": [(b"content-type", b"application/json")]}
        asyncio.run(BodyLimit(reached, 2**20, timeout=0.2)(scope, trickle, send))
        assert sent[0]["status"] == 408 and shape(json.loads(sent[1]["body"])), sent


@pytest.mark.parametrize("path, body, param", [
    # a value of the wrong JSON type is refused by name, not coerced (true was taken as 1)
    ("/v1/chat/completions", {"max_tokens": True}, "max_tokens"), ("/v1/chat/completions", {"stream": "yes"}, "stream"),
    ("/v1/chat/completions", {"n": "2"}, "n"), ("/v1/responses", {"stream": "yes"}, "stream"),
    ("/v1/responses", {"max_output_tokens": True}, "max_output_tokens"),
    ("/v1/chat/completions", {"tandem": {"mtp": "yes"}}, "tandem.mtp"),
    # -1 is llama-server's random seed; below it, or past 64 bits, is no seed
    ("/v1/chat/completions", {"seed": -2}, "seed"), ("/v1/chat/completions", {"seed": 2**64}, "seed"),
])
def test_values_of_the_wrong_type_or_range_are_refused_by_name(path, body, param):
    base = {"model": "gemma-4", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}], "input": "hi"}
    r = client().post(path, json={**base, **body})
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


@pytest.mark.parametrize("path, field", [
    ("/v1/chat/completions", "messages[0].content"), ("/v1/messages", "messages[0].content"),
    ("/v1/responses", "input"), ("/tokenize", "content"),
])
def test_a_lone_surrogate_is_refused_naming_where_it_is(path, field):
    """JSON's escapes allow "\\ud800" alone, which no UTF-8 text holds: the tokenizer failed on it in
    Python's own words, with no param."""
    text = {"messages[0].content": '"messages": [{"role": "user", "content": "a\\ud800b"}]',
            "input": '"input": "a\\ud800b"', "content": '"content": "a\\ud800b"'}[field]
    raw = '{"model": "gemma-4", "max_tokens": 4, ' + text + "}"
    r = client().post(path, content=raw.encode(), headers={"content-type": "application/json"})
    assert r.status_code == 400 and "surrogate" in r.text and field in r.text, r.text
    assert "codec" not in r.text


def test_an_unexpected_error_is_a_500_in_the_apis_own_shape():
    """Whatever no route expected (here: the engine lookup itself fails) is logged and answered
    as JSON in the shape of the API asked, not as Starlette's plain-text 500."""
    def broken():
        raise RuntimeError("boom")
    c = TestClient(create_app(ServerState(broken, "gemma-4")), base_url="http://127.0.0.1",
                   raise_server_exceptions=False)
    r = c.post("/v1/messages", json={"max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 500 and r.json()["type"] == "error" and r.json()["error"]["type"] == "api_error"
    r = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 500 and r.json()["error"]["code"] == "internal_error"
    assert "RuntimeError" in r.json()["error"]["message"] and "boom" not in r.json()["error"]["message"]


def test_a_tool_result_whose_content_is_not_text_is_a_400_naming_it():
    c = client()
    r = c.post("/v1/messages", json={"max_tokens": 5, "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": 5}]}]})
    assert r.status_code == 400 and r.json()["type"] == "error"
    assert "messages[2].content[0].content" in r.json()["error"]["message"]


def test_a_replys_log_line_says_how_much_of_its_prompt_was_read_from_the_cache():
    """A user watching `tandem serve` sees what each request cost it: the prompt, and how much of
    it came from the prompt cache (slot, memory or disk) instead of being read again."""
    from engine.serve.admission import log_line
    from engine.stats import GenerationStats

    seen = []
    state = ServerState(lambda: None, "gemma-4", on_log=seen.append)
    state.finished("chat", [GenerationStats(prompt_tokens=4446, reused_tokens=4410, prefill_tokens=36,
                                            generated_tokens=16)], False, 0.25)
    line = log_line(seen[-1])
    assert line.startswith("OpenAI chat: 16 tokens, ") and line.endswith(", prompt 4,446 tokens (4,410 cached)")
