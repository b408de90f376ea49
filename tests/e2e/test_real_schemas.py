"""Real-world JSON schemas through a real `tandem serve`: a fixed sample of JSONSchemaBench
(tests/data/jsonschemabench/, its README says which and from where), each sent as
response_format json_schema. Every schema is either refused with a 400 naming the keyword
Tandem cannot enforce and where the schema uses it, or answered: a reply that ended ("stop")
must validate with `jsonschema` (formats checked too), and one cut at max_tokens ("length") is
counted apart, not as invalid. Never a 200 with complete invalid JSON, never a 500.

The tiny synthetic pair's random weights write whatever the grammar lets through, so free-form
strings (and extra keys, which a schema allows unless it says additionalProperties: false)
often run to max_tokens: that is a cut, not a failure; the last test checks that enough replies
did end, so validation is really exercised. scripts/schema_coverage.py runs the same sample
against llama-server for the side-by-side count."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx2 as httpx
import jsonschema
import pytest

# 81 real schemas, up to 256 tokens each; one test process runs them all (--dist loadfile), so the
# last test can count them
pytestmark = pytest.mark.slow
DATA = Path(__file__).resolve().parents[1] / "data" / "jsonschemabench"
SCHEMAS = sorted(DATA.glob("*/*.json"))
MAX_TOKENS = 256
# "the JSON schema uses 'KEY' (at /path), ..." (grammar.py's refusal of a keyword)
NAMED = re.compile(r"'([$\w]+)' \(at (/[^)]*)\)")
OUTCOMES: dict[str, str] = {}  # schema -> valid / cut / refused, as the tests below go


def validator(schema):
    """A validator of the schema's own draft, formats checked (jsonschema skips them unless asked)."""
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def pointer(schema, path: str):
    """The part of `schema` at JSON pointer `path` ("/" is the whole)."""
    node = schema
    for part in [p for p in path.split("/") if p]:
        part = part.replace("~1", "/").replace("~0", "~")
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def ask(url: str, schema, max_tokens: int = MAX_TOKENS) -> httpx.Response:
    body = {"model": "m", "messages": [{"role": "user", "content": "Give an example as JSON."}],
            "max_tokens": max_tokens, "temperature": 0,
            "response_format": {"type": "json_schema", "json_schema": {"name": "example", "schema": schema}}}
    return httpx.post(f"{url}/chat/completions", json=body, timeout=300)


@pytest.fixture(scope="module")
def server(gemma4_tools):
    """`tandem serve` on the tiny pair with Gemma 4's real template, as tools_server, on one
    thread: on a busy two-core machine llama.cpp's two threads wait on each other (a reply can
    take 10-25 times as long)."""
    from ..support.serve import Serve

    s = Serve(gemma4_tools, "--draft-max", "3", "--threads", "1", "--parallel", "1")
    yield s
    s.stop()


def test_the_sample_covers_every_collection_and_is_lean():
    folders = {p.parent.name for p in SCHEMAS}
    assert len(SCHEMAS) >= 70 and len(folders) >= 9, (len(SCHEMAS), folders)
    assert all(p.stat().st_size <= 32 * 1024 for p in SCHEMAS)
    for p in SCHEMAS:
        validator(json.loads(p.read_text())).check_schema(json.loads(p.read_text()))  # each is a valid schema


@pytest.mark.parametrize("path", SCHEMAS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_a_real_schema_is_answered_with_valid_json_or_refused_naming_the_keyword(server, path):
    schema = json.loads(path.read_text())
    name = f"{path.parent.name}/{path.name}"
    r = ask(server.url, schema)
    assert r.status_code in (200, 400), (r.status_code, r.text[:2000])
    if r.status_code == 400:
        OUTCOMES[name] = "refused"
        msg = r.json()["error"]["message"]
        m = NAMED.search(msg)
        assert m, msg
        keyword, where = m.groups()
        assert keyword in pointer(schema, where), (keyword, where, msg)  # named where the schema really uses it
        return
    choice = r.json()["choices"][0]
    text = choice["message"]["content"]
    assert choice["finish_reason"] in ("stop", "length"), choice
    if choice["finish_reason"] == "stop":  # complete: it must parse and validate
        validator(schema).validate(json.loads(text))
    OUTCOMES[name] = "valid" if choice["finish_reason"] == "stop" else "cut"


def test_enough_replies_ended_and_most_schemas_were_answered():
    """Over the whole sample (run after the schemas above): not all cut, so validation was
    really exercised, and refusals stay the exception. On the tiny pair at 256 tokens: 40 valid,
    31 cut, 8 refused."""
    if len(OUTCOMES) < len(SCHEMAS):
        pytest.skip("the whole sample did not run in this session")
    counts = {k: sum(1 for v in OUTCOMES.values() if v == k) for k in ("valid", "cut", "refused")}
    print(counts)
    assert counts["valid"] >= 20 and counts["refused"] <= len(SCHEMAS) // 6, counts
