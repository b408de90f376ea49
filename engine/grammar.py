"""Constrained decoding: llama.cpp's own grammar sampler (GBNF) over the target's choices.

A `Grammar` follows one generation: `allows(token)` asks whether the grammar accepts a token
now, `constrain(logits)` rules out every token it does not (llama.cpp sets them to -inf), and
`accept(token)` advances it over a token that was kept. Decoding strategies accept exactly the
tokens they keep, in order, so with MTP each verify row is judged by the grammar state after
the tokens before it, and a rejected draft never reaches the grammar: nothing to roll back.

JSON schemas become GBNF with llama-cpp-python's port of llama.cpp's converter, after checks
that bound what a hostile schema can cost (size, depth, enum values); remote `$ref`s are never
fetched.
"""

from __future__ import annotations

import ctypes
import json

import numpy as np

from .errors import TandemError
from .llama import lib

MAX_SCHEMA_BYTES = 64 * 1024
MAX_SCHEMA_DEPTH = 24
MAX_SCHEMA_NODES = 4000
MAX_ENUM_VALUES = 1000
MAX_GRAMMAR_BYTES = 256 * 1024
PREFILTER = 4096  # candidates checked before the whole vocabulary (see Grammar.best)
PORT_CHAR, JSON_CHAR = r'char ::= [^"\\] |', r'char ::= [^"\\\x7F\x00-\x1F] |'
# Value constraints the converter does not turn into grammar: refused by name rather than
# answered with JSON that breaks them (annotations such as title or description are fine).
UNENFORCED = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "uniqueItems", "not",
              "if", "then", "else", "contains", "minProperties", "maxProperties", "patternProperties",
              "dependentRequired", "dependentSchemas", "propertyNames")

# any JSON object (response_format json_object): llama.cpp's json.gbnf, rooted at an object
JSON_OBJECT_GBNF = r'''
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws
ws ::= | " " | "\n" [ \t]{0,20}
'''


class GrammarError(TandemError, ValueError):
    """A grammar or schema that cannot be used: the message names the problem."""


def _check_schema(schema, depth: int = 0, count: list | None = None) -> None:
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
        for key in UNENFORCED:
            if key in schema:
                raise GrammarError(f"the JSON schema uses {key!r}, which Tandem cannot enforce while decoding; "
                                   "leave it out (or check it after the reply)")
        for k, v in schema.items():
            if k in ("properties", "$defs", "definitions"):  # names, then schemas
                if isinstance(v, dict):
                    for sub in v.values():
                        _check_schema(sub, depth + 1, count)
                continue
            if k in ("enum", "const", "default", "examples"):  # values, not schemas
                continue
            _check_schema(v, depth + 1, count)
    elif isinstance(schema, list):
        for v in schema:
            _check_schema(v, depth + 1, count)


def schema_to_gbnf(schema) -> str:
    """GBNF for a JSON schema (a dict, or its JSON text), or GrammarError naming the problem."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    text = schema if isinstance(schema, str) else json.dumps(schema)
    if len(text.encode("utf-8")) > MAX_SCHEMA_BYTES:
        raise GrammarError(f"the JSON schema is larger than {MAX_SCHEMA_BYTES // 1024} KB")
    try:
        parsed = json.loads(text)
    except ValueError as e:
        raise GrammarError(f"the JSON schema is not valid JSON: {e}") from None
    if not isinstance(parsed, (dict, bool)):
        raise GrammarError("a JSON schema is an object")
    _check_schema(parsed)
    try:
        gbnf = json_schema_to_gbnf(text)
    except RecursionError:
        raise GrammarError("the JSON schema refers to itself too deeply") from None
    except AssertionError as e:  # the converter's way of saying "Unrecognized schema: {...}"
        raise GrammarError(f"the JSON schema has a part Tandem cannot read: {str(e).split(': ', 1)[-1]}"[:300]) from None
    except Exception as e:  # the converter's own complaints (bad patterns, ...)
        raise GrammarError(f"the JSON schema cannot be used: {e}"[:300]) from None
    if len(gbnf) > MAX_GRAMMAR_BYTES:
        raise GrammarError("the JSON schema makes a grammar too large to use")
    # the port's string characters let control characters through unescaped, which no JSON
    # parser accepts; llama.cpp's own converter rules them out, as here
    return gbnf.replace(PORT_CHAR, JSON_CHAR)


class Grammar:
    """llama.cpp's grammar sampler for one generation."""

    def __init__(self, vocab, gbnf: str, n_vocab: int):
        if len(gbnf) > MAX_GRAMMAR_BYTES:
            raise GrammarError(f"the grammar is larger than {MAX_GRAMMAR_BYTES // 1024} KB")
        self._smpl = lib.llama_sampler_init_grammar(vocab, gbnf.encode("utf-8"), b"root")
        if not self._smpl:
            raise GrammarError("the grammar could not be parsed (llama.cpp's log says where)")
        self.n_vocab = n_vocab
        # every token, as llama_token_data rows: reused for each full constraint
        self._all = np.zeros(n_vocab, dtype=[("id", np.int32), ("logit", np.float32), ("p", np.float32)])
        self._all["id"] = np.arange(n_vocab, dtype=np.int32)
        self._one = (lib.llama_token_data * 1)()

    def _apply(self, data, size: int) -> None:
        """The grammar over `size` llama_token_data rows at `data` (a ctypes array or an address)."""
        arr = lib.llama_token_data_array(ctypes.cast(data, ctypes.POINTER(lib.llama_token_data)), size, -1, False)
        lib.llama_sampler_apply(self._smpl, ctypes.byref(arr))

    def allows(self, token: int) -> bool:
        self._one[0].id, self._one[0].logit, self._one[0].p = token, 0.0, 0.0
        self._apply(self._one, 1)
        return self._one[0].logit != float("-inf")

    def constrain(self, logits: np.ndarray, top_k: int = 0) -> np.ndarray:
        """A copy of `logits` with every token the grammar rules out now at -inf. With `top_k`,
        only what top-k sampling needs is exact: the k best allowed tokens are kept (found among
        the best PREFILTER when there are k there, as `best` does) and the rest may be -inf."""
        if 0 < top_k <= PREFILTER < self.n_vocab:
            ids, kept = self._best_allowed(logits)
            if len(ids) >= top_k:
                out = np.full_like(logits, -np.inf, dtype=np.float32)
                out[ids] = kept
                return out
        rows = self._all
        rows["logit"] = logits[:self.n_vocab]
        self._apply(rows.ctypes.data, self.n_vocab)
        out = logits.astype(np.float32, copy=True)
        out[:self.n_vocab] = rows["logit"]  # the grammar never reorders: its rows keep their ids
        return out

    def best(self, logits: np.ndarray, full: bool = True) -> int:
        """The highest-logit token the grammar allows now: greedy decoding under the grammar.
        The whole vocabulary is checked only when neither the favourite token nor any of the
        best PREFILTER are allowed (checking all of a 262k vocabulary costs more than a decode
        of a 1B model; llama.cpp's own sampler checks the favourite, then everything). Exact:
        any token outside the best PREFILTER scores lower than every one inside. With
        `full=False` the whole vocabulary is never checked: -1 when no cheap check found one."""
        tok = int(np.argmax(logits[:self.n_vocab]))
        if self.allows(tok):
            return tok
        ids, kept = self._best_allowed(logits)
        if len(ids):
            return int(ids[np.argmax(kept)])
        return int(np.argmax(self.constrain(logits))) if full else -1

    def _best_allowed(self, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Of the best PREFILTER tokens (by logit), those the grammar allows now: (ids, logits)."""
        n = min(PREFILTER, self.n_vocab)
        ids = np.argpartition(-logits[:self.n_vocab], n - 1)[:n]
        rows = self._all[:n].copy()
        rows["id"], rows["logit"] = ids, logits[ids]
        self._apply(rows.ctypes.data, n)
        ok = np.isfinite(rows["logit"])
        return rows["id"][ok], rows["logit"][ok]

    def clone(self) -> "Grammar":
        """An independent copy in the same state (to draft ahead without moving this one)."""
        twin = object.__new__(Grammar)
        twin._smpl, twin.n_vocab, twin._all, twin._one = (lib.llama_sampler_clone(self._smpl), self.n_vocab,
                                                          self._all, (lib.llama_token_data * 1)())
        return twin

    def accept(self, token: int) -> None:
        lib.llama_sampler_accept(self._smpl, token)

    def close(self) -> None:
        if self._smpl:
            lib.llama_sampler_free(self._smpl)
            self._smpl = None

    def __del__(self):
        self.close()

