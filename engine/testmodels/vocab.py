"""The test models' vocabularies and chat templates: the synthetic SPM vocabulary (Gemma 4's
control tokens, the 256 byte tokens, a few words, filler), the successor the target's head
follows, and Gemma 4's real tokenizer, read out of `ggml-vocab-gemma-4.gguf` in the pinned
llama-cpp-python sdist (fetched once), with a reader of GGUF metadata."""

from __future__ import annotations

import mmap
import os
import struct
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

# Special tokens, Gemma 4 style. Ids are fixed so templates and tests can rely on them.
SPECIAL_TOKENS = [
    "<pad>", "<eos>", "<bos>", "<unk>",
    "<|turn>", "<turn|>", "<|channel>", "<channel|>", "<|think|>",
    "<|tool_call>", "<tool_call|>", "<mask>",
]
# Gemma 4's other control tokens (tool declarations and responses, the string delimiter of
# tool-call arguments, media): at the END of the vocabulary, so the ids above and of every
# ordinary token stay what they were. The successor walk never reaches them (see successor).
EXTRA_SPECIAL_TOKENS = ["<|tool>", "<tool|>", "<|tool_response>", "<tool_response|>", '<|"|>',
                        "<|image|>", "<|audio|>"]
WORDS = [
    "▁the", "▁a", "▁and", "▁of", "▁to", "▁in", "▁is", "▁it", "▁you", "▁that",
    "▁for", "▁on", "▁with", "▁as", "▁was", "▁be", "▁at", "▁this", "▁have", "▁from",
    "▁Hello", "▁world", "▁model", "▁token", "▁fast", "▁draft", "▁verify", "▁chat",
    "▁code", "▁def", "▁return", "▁print", "▁import", "▁class", "▁if", "▁else",
    "▁for", "▁while", "▁True", "▁False", "▁None", "▁user", "▁answer", "▁think",
    "▁Gemma", "▁speed", "▁test", "▁python", "▁function", "▁value", "▁list",
    "(", ")", ":", ",", ".", "▁=", "▁+", "\n", "▁▁▁▁", "▁",
] + [chr(c) for c in range(ord("a"), ord("z") + 1)] + [chr(c) for c in range(ord("A"), ord("Z") + 1)]

# A Gemma-4-style chat template written for these files: same turn and channel markers,
# `enable_thinking` switch and empty thought block when thinking is off, as Gemma 4's own.
CHAT_TEMPLATE = """{{- bos_token -}}
{%- set loop_messages = messages -%}
{%- if (enable_thinking is defined and enable_thinking) or messages[0]['role'] == 'system' -%}
{{- '<|turn>system\\n' -}}
{%- if enable_thinking is defined and enable_thinking -%}{{- '<|think|>\\n' -}}{%- endif -%}
{%- if messages[0]['role'] == 'system' -%}
{{- messages[0]['content'] | trim -}}
{%- set loop_messages = messages[1:] -%}
{%- endif -%}
{{- '<turn|>\\n' -}}
{%- endif -%}
{%- for message in loop_messages -%}
{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}
{{- '<|turn>' + role + '\\n' -}}
{%- if role == 'model' -%}
{%- set ns = namespace(out='') -%}
{%- for part in message['content'].split('<channel|>') -%}
{%- if '<|channel>' in part -%}{%- set ns.out = ns.out + part.split('<|channel>')[0] -%}
{%- else -%}{%- set ns.out = ns.out + part -%}{%- endif -%}
{%- endfor -%}
{{- ns.out | trim -}}
{%- else -%}
{{- message['content'] | trim -}}
{%- endif -%}
{{- '<turn|>\\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|turn>model\\n' -}}
{%- if not enable_thinking | default(false) -%}{{- '<|channel>thought\\n<channel|>' -}}{%- endif -%}
{%- endif -%}"""


def chat_template(name: str) -> str:
    if name == "tandem":
        return CHAT_TEMPLATE
    if name == "gemma4":  # as llama.cpp ships it; see resources/templates/README.md
        from importlib.resources import files

        return files("resources").joinpath("templates/gemma-4-it.jinja").read_text(encoding="utf-8")
    raise ValueError(f"unknown template {name!r}: 'tandem' or 'gemma4'")


def vocabulary(n_vocab: int) -> tuple[list[str], list[float], list[int]]:
    """Tokens, scores and types: specials, the 256 byte tokens, some words, then filler."""
    import gguf

    T = gguf.TokenType
    toks = list(SPECIAL_TOKENS)
    types = [T.CONTROL] * len(toks)
    types[3] = T.UNKNOWN
    toks += [f"<0x{b:02X}>" for b in range(256)]
    types += [T.BYTE] * 256
    seen = set(toks)
    for w in WORDS:
        if w not in seen:
            toks.append(w)
            types.append(T.NORMAL)
            seen.add(w)
    i = 0
    while len(toks) < n_vocab - len(EXTRA_SPECIAL_TOKENS):
        toks.append(f"▁w{i:06d}")
        types.append(T.NORMAL)
        i += 1
    toks += EXTRA_SPECIAL_TOKENS
    types += [T.CONTROL] * len(EXTRA_SPECIAL_TOKENS)
    if len(toks) > n_vocab:
        raise ValueError(f"n_vocab must be at least {len(toks)}")
    # SPM merges by score: longer pieces first.
    special = set(SPECIAL_TOKENS) | set(EXTRA_SPECIAL_TOKENS)
    scores = [0.0 if t in special or t.startswith("<0x") else -float(j) for j, t in enumerate(toks)]
    return toks, scores, [int(t) for t in types]


def successor(n_vocab: int) -> np.ndarray:
    """succ[t] = t + 1, except that the last ordinary token wraps to the first byte token, so a
    walk never reaches <eos> by wrapping (only <|turn> is followed by the end-of-turn token),
    and the extra control tokens lead to the next byte tokens: a walk never reaches one of them
    either, and no head row sums more than two embeddings (one that did would win everywhere)."""
    n_extra = len(EXTRA_SPECIAL_TOKENS)
    s = np.arange(1, n_vocab + 1)
    s[n_vocab - n_extra - 1] = len(SPECIAL_TOKENS)
    s[n_vocab - n_extra:] = len(SPECIAL_TOKENS) + 1 + np.arange(n_extra)
    return s

# ---- Gemma 4's real vocabulary ----------------------------------------------------------------

LLAMA_VERSION = "0.3.36"  # the pinned llama-cpp-python (pyproject.toml, packaging/build-llama-server.sh)
GEMMA4_VOCAB = "vendor/llama.cpp/models/ggml-vocab-gemma-4.gguf"  # in the sdist; .inp/.out beside it


class VocabUnavailable(RuntimeError):
    """The pinned llama-cpp-python sdist (and so Gemma 4's vocabulary file) could not be had."""


def llama_src_cache() -> Path:
    """Where the pinned sdist is downloaded and extracted: $TANDEM_LLAMA_SRC or ~/.cache/tandem/llama-src."""
    return Path(os.environ.get("TANDEM_LLAMA_SRC", Path.home() / ".cache" / "tandem" / "llama-src"))


def llama_src(rel: str = "") -> Path:
    """`rel` inside the pinned llama-cpp-python sdist's source tree (its vendored llama.cpp under
    vendor/llama.cpp), in llama_src_cache(). When it is not there yet the sdist is downloaded
    once with pip (from PyPI) and the members whose path starts with `rel` (all of them for "")
    are extracted, each file or folder moved into place whole. Raises VocabUnavailable when pip
    cannot get the sdist (offline, no index)."""
    cache = llama_src_cache()
    top = f"llama_cpp_python-{LLAMA_VERSION}"
    path = cache / top / rel
    if path.exists():
        return path
    sdist = cache / f"{top}.tar.gz"
    if not sdist.exists():
        cache.mkdir(parents=True, exist_ok=True)
        print(f"downloading the llama-cpp-python {LLAMA_VERSION} sdist (once)...", file=sys.stderr)
        r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                            "-d", str(cache), f"llama-cpp-python=={LLAMA_VERSION}"],
                           capture_output=True, text=True)
        if r.returncode != 0 or not sdist.exists():
            tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["no sdist written"]
            raise VocabUnavailable(f"pip could not download the llama-cpp-python {LLAMA_VERSION} sdist: {tail[0]}")
    prefix = f"{top}/{rel}".rstrip("/")
    with tempfile.TemporaryDirectory(dir=cache) as tmp, tarfile.open(sdist) as tf:
        members = [m for m in tf.getmembers() if m.name.startswith(prefix)]
        if not members:
            raise VocabUnavailable(f"{sdist.name} has no {prefix}")
        tf.extractall(tmp, members=members, filter="data")
        # each file or folder moved into place whole: a folder `rel`, or files named `rel`*
        roots = {prefix if m.name.startswith(prefix + "/") else m.name for m in members}
        for root in sorted(roots):
            dst = cache / root
            if not dst.exists():
                dst.parent.mkdir(parents=True, exist_ok=True)
                os.replace(Path(tmp) / root, dst)
    return path


def gemma4_vocab_path() -> Path:
    """ggml-vocab-gemma-4.gguf (Gemma 4's tokenizer, no weights), with its reference
    tokenizations `.inp` / `.out` beside it, as llama.cpp's tests/test-tokenizer-0 reads them."""
    path = llama_src(GEMMA4_VOCAB)  # the prefix takes .inp and .out along
    for suffix in (".inp", ".out"):
        if not path.with_name(path.name + suffix).exists():
            llama_src(GEMMA4_VOCAB + suffix)
    return path


_SCALAR = {0: "u1", 1: "i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "u1", 10: "<u8", 11: "<i8",
           12: "<f8"}
_STRING, _ARRAY = 8, 9


def gguf_metadata(path: str | Path, strings: tuple[str, ...] = ()) -> dict[str, tuple[bytes, object]]:
    """A GGUF file's metadata: {key: (raw, value)}, `raw` the value's bytes as the file holds them
    (its type first), `value` the value read: scalars, strings, numeric arrays as numpy arrays,
    string arrays only for the keys in `strings` (None for the others: reading them is slow).
    Much faster than gguf.GGUFReader, which takes tens of seconds over a 262k vocabulary's merges."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as b:
        if b[:4] != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        (n_kv,) = struct.unpack_from("<Q", b, 16)
        off, out = 24, {}
        u32, u64 = struct.Struct("<I"), struct.Struct("<Q")

        def string(o):
            (n,) = u64.unpack_from(b, o)
            return b[o + 8:o + 8 + n], o + 8 + n

        for _ in range(n_kv):
            key, off = string(off)
            key = key.decode()
            start = off
            (vtype,) = u32.unpack_from(b, off)
            off += 4
            if vtype == _STRING:
                v, off = string(off)
                value = v.decode("utf-8", "replace")
            elif vtype == _ARRAY:
                (sub,) = u32.unpack_from(b, off)
                (n,) = u64.unpack_from(b, off + 4)
                off += 12
                if sub == _STRING:
                    keep = key in strings
                    value = [] if keep else None
                    for _ in range(n):
                        (m,) = u64.unpack_from(b, off)
                        if keep:
                            value.append(b[off + 8:off + 8 + m].decode("utf-8", "replace"))
                        off += 8 + m
                elif sub in _SCALAR:
                    dt = np.dtype(_SCALAR[sub])
                    value = np.frombuffer(b[off:off + n * dt.itemsize], dt).copy()
                    off += n * dt.itemsize
                else:
                    raise ValueError(f"{path}: {key} is an array of type {sub}, which this reader skips")
            elif vtype in _SCALAR:
                dt = np.dtype(_SCALAR[vtype])
                value = np.frombuffer(b[off:off + dt.itemsize], dt)[0].item()
                off += dt.itemsize
            else:
                raise ValueError(f"{path}: {key} has value type {vtype}")
            out[key] = (b[start:off], value)
    return out


@dataclass(frozen=True)
class RealVocab:
    """A real tokenizer's metadata (the tokenizer.* keys of its GGUF, but the chat template)."""

    raw: dict  # key -> the value's bytes as the vocab file holds them (type first)
    tokens: list
    types: np.ndarray

    @property
    def n_vocab(self) -> int:
        return len(self.tokens)

    def id(self, piece: str) -> int:
        return self.tokens.index(piece)


@lru_cache(maxsize=1)
def gemma4_vocab() -> RealVocab:
    meta = gguf_metadata(gemma4_vocab_path(), strings=("tokenizer.ggml.tokens",))
    raw = {k: r for k, (r, _) in meta.items() if k.startswith("tokenizer.") and k != "tokenizer.chat_template"}
    return RealVocab(raw, meta["tokenizer.ggml.tokens"][1], meta["tokenizer.ggml.token_type"][1])


def _is_text(piece: str, ttype: int) -> bool:
    """An ordinary text token: a normal piece with something besides white space (no run of
    spaces or newlines), not a placeholder (<unused12>, [multimodal]), nothing marker-like."""
    return (ttype == 1 and piece.replace("\u2581", " ").strip() != ""  # 1: gguf.TokenType.NORMAL
            and not (piece.startswith("<unused") and piece.endswith(">")) and piece != "[multimodal]"
            and "<|" not in piece and "|>" not in piece)


def walk_successor(vocab: RealVocab) -> np.ndarray:
    """The successor rule over a real vocabulary: succ[t] is the token the synthetic target
    predicts after t. The ordinary text tokens, in id order, form one cycle (each leads to the
    next one), so a reply walks over text (" t", "in", " a", "er", ...) and never reaches a
    control token, a byte token, white space alone or an unused slot; every other token leads
    into that cycle at its own place, spread evenly over it (so no head row sums more than two
    embeddings: one that did would win everywhere), except <|turn>, which leads to <turn|>
    (the end of a turn), as in the synthetic vocabulary."""
    V = vocab.n_vocab
    text = np.array([_is_text(p, int(t)) for p, t in zip(vocab.tokens, vocab.types)])
    walk = np.flatnonzero(text)
    succ = np.empty(V, dtype=np.int64)
    succ[walk] = np.roll(walk, -1)
    turn, end = vocab.id("<|turn>"), vocab.id("<turn|>")
    rest = np.flatnonzero(~text & (np.arange(V) != turn))
    assert len(rest) <= len(walk)
    succ[rest] = walk[(np.arange(len(rest)) * len(walk)) // len(rest)]
    succ[turn] = end
    return succ
