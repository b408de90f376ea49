"""Constrained decoding: one engine, llguidance, for every constraint Tandem decodes under —
JSON schemas (response_format, --json-schema, llama.cpp's json_schema extension), llama.cpp
GBNF grammars (the grammar extension, --grammar; converted to llguidance's Lark), and Gemma
4's tool-call syntax (engine/gemma4/call_grammar.py writes it in Lark).

llguidance, not llama.cpp's GBNF sampler, because of what it measured here on Gemma 4's real
262,144-token vocabulary: a token mask in ~0.03 ms median where llama.cpp's sampler checks the
whole vocabulary in ~36 ms; JSON Schema far more completely (minimum/maximum, formats,
patterns, prefixItems, boolean sub-schemas), and each keyword it cannot enforce is named in
its error, never dropped; and it is built for drafting: `validate_tokens` says how many drafted
tokens a grammar allows, `rollback` undoes them.

A `Grammar` follows one generation: `allows(token)`, `constrain(logits)` (every token it rules
out at -inf), `best(logits)` (greedy under it), `accept(token)` (advance over a token that was
kept), `clone()` (a copy to draft ahead with). Grammars are llguidance's own grammar strings,
made by `from_json_schema`, `from_gbnf` or `from_lark` (which check them: a bad or hostile one
is a GrammarError naming the problem, before anything is decoded).
"""

from __future__ import annotations

import json
import re
import threading
import warnings

import numpy as np

from ..errors import TandemError

MAX_SCHEMA_BYTES = 64 * 1024
MAX_SCHEMA_DEPTH = 24
MAX_SCHEMA_NODES = 4000
MAX_ENUM_VALUES = 1000
MAX_GRAMMAR_BYTES = 256 * 1024
# a number a schema does not bound stays within this: the largest integer a JSON parser (a double)
# holds exactly, 16 digits
MAX_UNBOUNDED = 2**53 - 1
# JSON's whitespace between tokens, as llama.cpp's converter allows it (a space, or one or two
# newlines and an indent): bounded, so a model that keeps writing spaces or newlines inside an
# object still reaches its end within max_tokens
JSON_OPTIONS = {"whitespace_pattern": r"( |\n{1,2}[ \t]{0,20})"}


_VALUES = ("enum", "const", "default", "examples")  # a schema's keywords whose values are JSON, not schemas
_NAMED = ("properties", "patternProperties", "$defs", "definitions")  # names -> schemas


class GrammarError(TandemError, ValueError):
    """A grammar or schema that cannot be used: the message names the problem; `raw`, the grammar
    engine's own words for it (unenforced.py reads which keywords it names)."""

    def __init__(self, message: str, raw: str = ""):
        super().__init__(message)
        self.raw = raw


def _limits():
    """What compiling and following one grammar may cost: lexer fuel (time) per compile and per
    token, Earley items per token, lexer states (memory, ~1-2 KB each), grammar size."""
    import llguidance

    return llguidance.LLParserLimits(initial_lexer_fuel=1_000_000, step_lexer_fuel=200_000, step_max_items=50_000,
                                     max_lexer_states=50_000, max_grammar_size=200_000, verbose_errors=False)


def _check_schema(schema, depth: int = 0, count: list | None = None) -> None:
    """Bounds on what a schema may cost before it is compiled: parts, nesting, enum sizes; and
    only local references (nothing is ever fetched)."""
    count = count if count is not None else [0]
    count[0] += 1
    if count[0] > MAX_SCHEMA_NODES:
        raise GrammarError(f"the JSON schema has more than {MAX_SCHEMA_NODES} parts")
    if depth > MAX_SCHEMA_DEPTH:
        raise GrammarError(f"the JSON schema nests deeper than {MAX_SCHEMA_DEPTH} levels")
    if isinstance(schema, dict):
        enum = schema.get("enum")
        if isinstance(enum, list) and len(enum) > MAX_ENUM_VALUES:
            raise GrammarError(f"the JSON schema's enum has {len(enum)} values (at most {MAX_ENUM_VALUES})")
        ref = schema.get("$ref")
        if isinstance(ref, str) and not ref.startswith("#"):
            raise GrammarError(f"the JSON schema refers to {ref[:80]!r}: only local references (#/...) are used")
        for k, v in schema.items():
            if k in _VALUES:
                continue
            _check_schema(v, depth + 1, count)
    elif isinstance(schema, list):
        for v in schema:
            _check_schema(v, depth + 1, count)


def _where(schema, key: str, path: str = "", value=None) -> str | None:
    """The JSON pointer of the first place `key` is used as a keyword in `schema` (with the
    value `value`, when one is given)."""
    if isinstance(schema, dict):
        if key in schema and (value is None or schema[key] == value):
            return path or "/"
        for k, v in schema.items():
            if k in _VALUES:
                continue
            if k in _NAMED and isinstance(v, dict):
                for name, sub in v.items():
                    found = _where(sub, key, f"{path}/{k}/{name.replace('~', '~0').replace('/', '~1')}", value)
                    if found:
                        return found
                continue
            found = _where(v, key, f"{path}/{k}", value)
            if found:
                return found
    elif isinstance(schema, list):
        for i, v in enumerate(schema):
            found = _where(v, key, f"{path}/{i}", value)
            if found:
                return found
    return None


# llguidance's complaints that come without the keyword's place: (its words, the keyword, why)
_UNSUPPORTED = [
    (r"Unknown format: (.+)", "format", "a format it does not know ({0}): leave it out, or use a 'pattern'"),
    (r"oneOf constraints are not supported", "oneOf",
     "branches that may overlap, so exactly one cannot be enforced: use anyOf if any one will do"),
    (r"min/maxProperties only supported", None,
     "a property count that can only be enforced when every property it names is required"),
]


_INTERSECTING = ("allOf", "if", "then", "else", "not", "dependentSchemas", "unevaluatedProperties")
_SCHEMA_KEYS = ("properties", "required", "patternProperties", "additionalProperties", "type", "items")


def _intersects(schema) -> bool:
    """Whether a schema combines sub-schemas by intersection anywhere (allOf, if/then, or
    $ref/anyOf/oneOf beside keywords of their own), where closing objects would change which
    keys are allowed rather than only leave unasked-for keys out."""
    if isinstance(schema, dict):
        if any(k in schema for k in _INTERSECTING):
            return True
        if any(k in schema for k in ("$ref", "anyOf", "oneOf")) and any(k in schema for k in _SCHEMA_KEYS):
            return True
        return any(_intersects(list(v.values()) if k in _NAMED and isinstance(v, dict) else v)
                   for k, v in schema.items() if k not in _VALUES)
    if isinstance(schema, list):
        return any(_intersects(v) for v in schema)
    return False


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _tightened(schema):
    """The schema as Tandem decodes it: what it allows, less what a model could only run on
    with until max_tokens; every reply still validates against the schema as given.
    - `additionalProperties: false` on each object that declares properties and says nothing
      about others (as llama-server's and vLLM's converters do, and tool calls' arguments here):
      the reply holds the keys the schema names instead of invented ones. Not where that would
      change which keys are allowed: a schema that says `additionalProperties` keeps its word,
      an object that requires a key it does not declare stays open, and so does every object
      of a schema that intersects sub-schemas (closing both sides of an allOf would forbid each
      side's keys).
    - `uniqueItems: false`, which allows everything, is left out.
    - numbers without bounds stay within ±(2^53 - 1), at most 16 digits before any decimal point
      (llama.cpp's converter and tool calls' arguments here allow 16): a model writing digits
      does not write them forever."""
    may_close = not _intersects(schema)

    def tighten(s):
        if isinstance(s, list):
            return [tighten(v) for v in s]
        if not isinstance(s, dict):
            return s
        out = {}
        for k, v in s.items():
            if k == "uniqueItems" and v is False:  # says nothing (llguidance would refuse the keyword)
                continue
            if k in _VALUES:
                out[k] = v
            elif k in _NAMED and isinstance(v, dict):  # names -> schemas (a property may be called "properties")
                out[k] = {name: tighten(sub) for name, sub in v.items()}
            else:
                out[k] = tighten(v)
        props = s.get("properties")
        required = s.get("required") if isinstance(s.get("required"), list) else []  # draft 3: a bool
        if may_close and isinstance(props, dict) and "additionalProperties" not in s and "patternProperties" not in s \
                and all(k in props for k in required if isinstance(k, str)):
            out["additionalProperties"] = False
        types = s.get("type") if isinstance(s.get("type"), list) else [s.get("type")]
        if ("number" in types or "integer" in types) and not any(k in s for k in ("enum", "const")):
            lo = [v for k in ("minimum", "exclusiveMinimum") if _number(v := s.get(k))]
            hi = [v for k in ("maximum", "exclusiveMaximum") if _number(v := s.get(k))]
            # a bound of the schema's own stands; one beyond the range keeps the other side open
            if not any(k in s for k in ("minimum", "exclusiveMinimum")) and min(hi, default=0) > -MAX_UNBOUNDED:
                out["minimum"] = -MAX_UNBOUNDED
            if not any(k in s for k in ("maximum", "exclusiveMaximum")) and max(lo, default=0) < MAX_UNBOUNDED:
                out["maximum"] = MAX_UNBOUNDED
        return out

    return tighten(schema)


def _schema_error(schema, message: str) -> GrammarError:
    """llguidance's complaint about a schema, in words, naming each keyword it cannot enforce and
    where the schema uses it."""
    m = re.search(r"Unimplemented keys: \[([^\]]*)\]", message)
    if m:
        keys = re.findall(r'"([^"]+)"', m.group(1))
        where = ", ".join(f"{k!r} (at {_where(schema, k) or '/'})" for k in keys)
        return GrammarError(f"the JSON schema uses {where}, which Tandem cannot enforce while decoding; "
                            "leave it out, or send the schema without strict: true (what cannot be enforced is "
                            "then checked on the reply)", message)
    for words, key, why in _UNSUPPORTED:
        m = re.search(words, message)
        if not m:
            continue
        if key == "format":
            where = _where(schema, "format", value=m.group(1).strip())
        elif key is None:  # whichever of the two the schema uses
            key = "minProperties" if _where(schema, "minProperties") else "maxProperties"
            where = _where(schema, key)
        else:
            where = _where(schema, key)
        return GrammarError(f"the JSON schema uses {key!r} (at {where or '/'}) with {why.format(*m.groups())}"[:400],
                            message)
    return GrammarError(f"the JSON schema cannot be used: {message.strip()}"[:400], message)


def from_json_schema(schema) -> str:
    """The grammar of JSON matching a schema (a dict, a bool, or its JSON text)."""
    import llguidance

    text = schema if isinstance(schema, str) else json.dumps(schema)
    if len(text.encode("utf-8")) > MAX_SCHEMA_BYTES:
        raise GrammarError(f"the JSON schema is larger than {MAX_SCHEMA_BYTES // 1024} KB")
    try:
        parsed = json.loads(text)
    except ValueError as e:
        raise GrammarError(f"the JSON schema is not valid JSON: {e}") from None
    if not isinstance(parsed, (dict, bool)):
        raise GrammarError("a JSON schema is an object (or true / false)")
    _check_schema(parsed)
    try:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(_tightened(parsed), defaults=JSON_OPTIONS)
    except ValueError as e:
        raise _schema_error(parsed, str(e)) from None
    err = llguidance.LLMatcher.validate_grammar(grammar, None, limits=_limits())
    if err:
        raise _schema_error(parsed, err)
    return grammar


def json_object() -> str:
    """Any JSON object (response_format json_object)."""
    return from_json_schema({"type": "object"})


def from_lark(lark: str) -> str:
    """A grammar in llguidance's Lark syntax (Tandem's own tool-call grammars)."""
    import llguidance

    if len(lark.encode("utf-8")) > MAX_GRAMMAR_BYTES:
        raise GrammarError(f"the grammar is larger than {MAX_GRAMMAR_BYTES // 1024} KB")
    grammar = llguidance.LLMatcher.grammar_from_lark(lark)
    err = llguidance.LLMatcher.validate_grammar(grammar, None, limits=_limits())
    if err:
        raise GrammarError(f"the grammar cannot be used: {err.strip()}"[:400])
    return grammar


def from_gbnf(gbnf: str) -> str:
    """A llama.cpp GBNF grammar (rooted at `root`), converted to llguidance's Lark."""
    from llguidance.gbnf_to_lark import any_to_lark

    if len(gbnf.encode("utf-8")) > MAX_GRAMMAR_BYTES:
        raise GrammarError(f"the grammar is larger than {MAX_GRAMMAR_BYTES // 1024} KB")
    try:
        lark = any_to_lark(gbnf)
    except Exception as e:  # the converter's own complaints: where the GBNF does not parse
        raise GrammarError(f"the grammar is not valid GBNF: {e}"[:400]) from None
    return from_lark(lark)


class Tokenizer:
    """llguidance's view of a model's vocabulary: built once per model (~1-4 s for 262k
    tokens, on first use), shared by its grammars. The model's end-of-generation tokens are
    what a finished grammar allows."""

    def __init__(self, vocab):
        self.vocab = vocab
        self._tok = None
        self._lock = threading.Lock()

    def get(self):
        with self._lock:
            if self._tok is None:
                from llguidance.llamacpp import lltokenizer_from_vocab

                from .llama import lib

                n = lib.llama_vocab_n_tokens(self.vocab)
                eog = [t for t in range(n) if lib.llama_vocab_is_eog(self.vocab, t)]
                with warnings.catch_warnings():  # it calls llama-cpp-python's deprecated token_get_attr
                    warnings.simplefilter("ignore", DeprecationWarning)
                    self._tok = lltokenizer_from_vocab(self.vocab, eos_token=eog or None)
            return self._tok


class Grammar:
    """One generation's grammar state (an llguidance matcher)."""

    def __init__(self, tokenizer: Tokenizer, grammar: str, n_vocab: int):
        import llguidance

        tok = tokenizer.get()
        self._m = llguidance.LLMatcher(tok, grammar, log_level=0, limits=_limits())
        if self._m.is_error():
            raise GrammarError(f"the grammar cannot be used: {self._m.get_error().strip()}"[:400])
        self.n_vocab = n_vocab  # the logits' width
        self.n_tok = min(tok.vocab_size, n_vocab)  # the tokenizer's (rows past the logits: never allowed)
        self._bits = np.full((tok.vocab_size + 31) // 32, -1, dtype=np.int32)

    def allowed(self) -> np.ndarray:
        """Which tokens the grammar allows now (bool, n_vocab)."""
        self._m.unsafe_compute_mask_ptr(self._bits.ctypes.data, self._bits.nbytes)
        ok = np.zeros(self.n_vocab, dtype=bool)
        ok[:self.n_tok] = np.unpackbits(self._bits.view(np.uint8), bitorder="little")[:self.n_tok]
        return ok

    def allows(self, token: int) -> bool:
        return 0 <= token < self.n_tok and self._m.validate_tokens([token]) == 1

    def constrain(self, logits: np.ndarray, top_k: int = 0) -> np.ndarray:
        """A copy of `logits` with every token the grammar rules out now at -inf (`top_k` is
        accepted for the callers' sake: the mask is cheap enough to make whole)."""
        out = logits.astype(np.float32, copy=True)
        out[:self.n_vocab][~self.allowed()] = -np.inf
        return out

    def best(self, logits: np.ndarray) -> int:
        """The highest-logit token the grammar allows now (greedy decoding under it): the
        favourite when allowed, else the best of the mask."""
        tok = int(np.argmax(logits[:self.n_vocab]))
        if self.allows(tok):
            return tok
        ok = self.allowed()
        if not ok.any():
            raise GrammarError(f"the grammar allows no token here ({self._m.get_error() or 'a dead end'})")
        return int(np.argmax(np.where(ok, logits[:self.n_vocab], -np.inf)))

    def valid_prefix(self, tokens: list[int]) -> int:
        """How many of `tokens` (drafts) the grammar allows in a row from here."""
        n = next((i for i, t in enumerate(tokens) if not 0 <= t < self.n_tok), len(tokens))
        return self._m.validate_tokens(list(tokens[:n])) if n else 0

    def forced(self) -> list[int]:
        """The tokens the grammar forces next (a fixed key, a closing brace): free drafts."""
        return self._m.compute_ff_tokens()

    def clone(self) -> "Grammar":
        """An independent copy in the same state (to draft ahead without moving this one)."""
        twin = object.__new__(Grammar)
        twin._m, twin.n_vocab, twin.n_tok = self._m.deep_copy(), self.n_vocab, self.n_tok
        twin._bits = np.empty_like(self._bits)
        return twin

    def accept(self, token: int) -> None:
        if not self._m.consume_token(token):
            raise GrammarError(f"the grammar does not allow token {token} here: {self._m.get_error()}"[:400])

    def close(self) -> None:
        """Nothing to free by hand (the matcher goes with the object)."""
