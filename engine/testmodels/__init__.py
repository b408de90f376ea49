"""Synthetic random-weight Gemma 4 target + MTP drafter GGUFs, for tests and benchmarks.

No real Gemma 4 weights exist where Tandem is built and tested, so this writes a `gemma4`
target and a matching `gemma4-assistant` drafter with the `gguf` package. They run through
llama.cpp's real Gemma 4 and MTP graphs.

How the weights make acceptance controllable (the "successor head"):
  * the target has its own LM head with row (t+1) = embedding(t), so after reading token t
    it predicts t+1; its random layers (scaled by `alpha`) add small deviations;
  * the drafter projects the target's embedding of its input token into its own width and
    has a head that predicts sigma(t) for token t, where sigma(t) = t+1 for a fraction
    `agreement` of the vocabulary and some other token for the rest.
So with agreement A about A of all drafts are accepted, and with A = 0 none is.

Two vocabularies (`vocab`):
  * "synthetic": a small SPM vocabulary written here (Gemma 4's control tokens, the 256 byte
    tokens, a few words, filler pieces), character-level for most text: fast tests;
  * "gemma4": Gemma 4's real tokenizer (262,144 tokens, its merges, its special tokens with
    their real ids), copied byte for byte from `ggml-vocab-gemma-4.gguf` of the pinned
    llama-cpp-python sdist, so prompts, chat templates, tool-call markers, grammar masks and
    lookup n-grams tokenize as a real Gemma 4 tokenizes them. The successor walk then goes
    over Gemma 4's ordinary text tokens (see walk_successor). The default of the E2B size.
"""

from __future__ import annotations

import math
import mmap
import os
import struct
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass, replace
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


@dataclass(frozen=True)
class SynthConfig:
    """Shape of a synthetic pair. Defaults are the `tiny` size."""

    n_vocab: int = 512
    n_embd: int = 64
    n_ff: int = 128
    n_head: int = 4
    n_head_kv_swa: int = 2
    n_head_kv_full: int = 1
    head_dim_swa: int = 16
    head_dim_full: int = 32
    n_swa: int = 16
    # S = sliding window, F = full. Last two must be S, F (the drafter shares those).
    layers: str = "SSSFSF"
    shared_kv_layers: int = 2
    ple_width: int = 8
    softcap: float = 30.0
    n_ctx_train: int = 32768  # room for the bench suite of code edits (a file twice, char-level tokens)
    drafter_embd: int = 32
    drafter_ff: int = 64
    drafter_head: int = 4
    drafter_layers: str = "SSSF"
    alpha: float = 0.3  # target deviation from the successor rule
    alpha_dft: float = 0.1  # drafter noise (above ~0.3 it stops agreeing)
    agreement: float = 1.0
    # >= 0: the drafter agrees exactly on tokens with ids from this one up (and never below),
    # so a reply walking up the vocabulary turns predictable half-way (adaptive-k tests)
    agree_from: int = -1
    seed: int = 0
    quantize: str | None = None  # e.g. "Q4_0" for the target; drafter then gets Q8_0
    template: str = "tandem"  # "tandem": CHAT_TEMPLATE; "gemma4": Gemma 4's real template (tools)
    vocab: str = "synthetic"  # "synthetic": vocabulary(); "gemma4": Gemma 4's real tokenizer (n_vocab 262144)


TINY = SynthConfig()
# E2B-shaped, about 1 B parameters (1.4 B with the separate successor head): Gemma 4 E2B's
# width, head dims and 262k vocabulary, 16 layers without per-layer embeddings.
E2B = SynthConfig(
    n_vocab=262144, n_embd=1536, n_ff=6144, n_head=8, n_head_kv_swa=1, n_head_kv_full=1,
    head_dim_swa=256, head_dim_full=512, n_swa=512, layers="SSSF" * 4, shared_kv_layers=0,
    ple_width=0, drafter_embd=512, drafter_ff=2048, drafter_head=4, drafter_layers="SSSF",
    alpha=0.05, alpha_dft=0.05, quantize="Q4_0", template="gemma4", vocab="gemma4",
)
SIZES = {"tiny": TINY, "e2b": E2B}
VOCABS = ("synthetic", "gemma4")
# What a vocabulary brings to a size whose own it is not (unless given): Gemma 4's real
# vocabulary its template, smaller deviations (among 262k tokens a deviation of the tiny
# target's 0.3 often makes another token win: the walk would no longer be predictable), and
# a wider drafter (32 dimensions tell 262k tokens apart badly; llama.cpp wants it narrower
# than the target).
VOCAB_DEFAULTS = {"gemma4": {"template": "gemma4", "alpha": 0.1, "alpha_dft": 0.05, "drafter_embd": 48},
                  "synthetic": {"template": "tandem"}}


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


def successor_of(cfg: SynthConfig) -> np.ndarray:
    return walk_successor(gemma4_vocab()) if cfg.vocab == "gemma4" else successor(cfg.n_vocab)


def _rand(rng, shape, scale):
    return (rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)).astype(np.float32)


class _Raw:
    """A metadata value already serialized (its type, then its bytes), as another GGUF holds it."""

    def __init__(self, data: bytes):
        self.data = data


def _add_raw(w, key: str, data: bytes) -> None:
    """Copy one metadata value byte for byte (gguf's writer would repack a 262k vocabulary and
    its 515k merges item by item: seconds per file)."""
    import gguf

    if not getattr(w, "_tandem_raw", False):
        pack = w._pack_val  # gguf==0.19.0 (pinned): write_kv_data_to_file packs each value with it

        def pack_val(val, vtype, add_vtype, sub_type=None):
            if isinstance(val, _Raw):
                assert add_vtype
                return val.data
            return pack(val, vtype, add_vtype, sub_type)

        w._pack_val = pack_val
        w._tandem_raw = True
    w.add_key_value(key, _Raw(data), gguf.GGUFValueType.ARRAY)


def _add_vocab(w, cfg: SynthConfig):
    if cfg.vocab == "gemma4":
        for key, data in gemma4_vocab().raw.items():
            _add_raw(w, key, data)
        return
    toks, scores, types = vocabulary(cfg.n_vocab)
    w.add_tokenizer_model("llama")
    w.add_token_list(toks)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_pad_token_id(0)
    w.add_eos_token_id(1)
    w.add_bos_token_id(2)
    w.add_unk_token_id(3)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)


def _common_attn_keys(w, cfg: SynthConfig, pattern: str, head_count: int, kv_heads: list[int]):
    w.add_context_length(cfg.n_ctx_train)
    w.add_block_count(len(pattern))
    w.add_head_count(head_count)
    w.add_head_count_kv(kv_heads)
    w.add_key_length(cfg.head_dim_full)
    w.add_value_length(cfg.head_dim_full)
    w.add_key_length_swa(cfg.head_dim_swa)
    w.add_value_length_swa(cfg.head_dim_swa)
    w.add_rope_dimension_count(cfg.head_dim_full)
    w.add_rope_dimension_count_swa(cfg.head_dim_swa)
    w.add_rope_freq_base(1e6)
    w.add_rope_freq_base_swa(1e4)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_sliding_window(cfg.n_swa)
    w.add_sliding_window_pattern([c == "S" for c in pattern])


def _rope_freqs(head_dim_full: int) -> np.ndarray:
    # Proportional RoPE factors as the converter writes them: 1.0 for the rotated half, then "off".
    n = head_dim_full // 2
    f = np.full(n, 1e30, dtype=np.float32)
    f[: n // 2] = 1.0
    return f


def _embeddings(cfg: SynthConfig, rng) -> np.ndarray:
    e = rng.standard_normal((cfg.n_vocab, cfg.n_embd), dtype=np.float32)
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    return e


def write_target(path: Path, cfg: SynthConfig, emb: np.ndarray, rng, ftype) -> None:
    import gguf

    d, L = cfg.n_embd, len(cfg.layers)
    assert cfg.layers[-2:] == "SF", "a gemma4 target's last two layers must be sliding then full"
    n_kv_from_start = L - cfg.shared_kv_layers
    w = gguf.GGUFWriter(str(path), "gemma4")
    w.add_name("Tandem synthetic gemma4 target")
    w.add_embedding_length(d)
    w.add_feed_forward_length(cfg.n_ff)
    kv = [cfg.n_head_kv_swa if c == "S" else cfg.n_head_kv_full for c in cfg.layers]
    _common_attn_keys(w, cfg, cfg.layers, cfg.n_head, kv)
    if cfg.shared_kv_layers:
        w.add_shared_kv_layers(cfg.shared_kv_layers)
    w.add_embedding_length_per_layer_input(cfg.ple_width)
    w.add_final_logit_softcapping(cfg.softcap)
    w.add_file_type(ftype)
    _add_vocab(w, cfg)
    w.add_chat_template(chat_template(cfg.template))

    _half_matrices(w, ftype)
    a = np.float32(cfg.alpha)
    w.add_tensor("token_embd.weight", emb)
    # Successor head: logits[succ(t)] is large after reading token t (~20 before the softcap).
    head = np.zeros_like(emb)
    np.add.at(head, successor_of(cfg), emb * np.float32(20.0 / math.sqrt(d)))
    w.add_tensor("output.weight", head)
    w.add_tensor("output_norm.weight", np.ones(d, np.float32))
    w.add_tensor("rope_freqs.weight", _rope_freqs(cfg.head_dim_full))
    P = cfg.ple_width
    if P:
        w.add_tensor("per_layer_token_embd.weight", _rand(rng, (cfg.n_vocab, P * L), 1.0))
        w.add_tensor("per_layer_model_proj.weight", _rand(rng, (P * L, d), 1 / math.sqrt(d)))
        w.add_tensor("per_layer_proj_norm.weight", np.ones(P, np.float32))
    for i, c in enumerate(cfg.layers):
        hd = cfg.head_dim_swa if c == "S" else cfg.head_dim_full
        H, K = cfg.n_head, kv[i]
        b = f"blk.{i}."
        _add_block(w, b, rng, d, hd, H, cfg.n_ff, a, kv_heads=K if i < n_kv_from_start else 0)
        if P:
            w.add_tensor(b + "inp_gate.weight", _rand(rng, (P, d), 1 / math.sqrt(d)))
            w.add_tensor(b + "proj.weight", _rand(rng, (d, P), 1 / math.sqrt(P)))
            w.add_tensor(b + "post_norm.weight", np.full(d, a, np.float32))
    _finish(w)


def write_drafter(path: Path, cfg: SynthConfig, emb: np.ndarray, rng, ftype) -> None:
    import gguf

    d, A, V = cfg.n_embd, cfg.drafter_embd, cfg.n_vocab
    assert cfg.drafter_layers[-1] == "F"
    w = gguf.GGUFWriter(str(path), "gemma4-assistant")
    w.add_name("Tandem synthetic gemma4 MTP drafter")
    w.add_embedding_length(A)
    w.add_embedding_length_out(d)
    w.add_feed_forward_length(cfg.drafter_ff)
    w.add_nextn_predict_layers(len(cfg.drafter_layers))
    # Each drafter layer reads the KV heads of the target layer it shares.
    kv = [cfg.n_head_kv_swa if c == "S" else cfg.n_head_kv_full for c in cfg.drafter_layers]
    _common_attn_keys(w, cfg, cfg.drafter_layers, cfg.drafter_head, kv)
    w.add_file_type(ftype)
    _add_vocab(w, cfg)

    _half_matrices(w, ftype)
    ad = np.float32(cfg.alpha_dft)
    # Orthonormal projection of the target's embedding space into the drafter's width.
    q, _ = np.linalg.qr(rng.standard_normal((d, A)).astype(np.float32))
    proj = q.T.astype(np.float32)  # (A, d), orthonormal rows
    pre = np.concatenate([proj, _rand(rng, (A, d), float(ad) / math.sqrt(d))], axis=1)
    w.add_tensor("nextn.pre_projection.weight", pre)  # ggml [2d, A]
    w.add_tensor("nextn.post_projection.weight", proj.T.copy())  # ggml [A, d]

    # sigma(t): the token the drafter proposes after t.
    agree = rng.random(V) < cfg.agreement
    if cfg.agree_from >= 0:
        agree = np.arange(V) >= cfg.agree_from
    succ = successor_of(cfg)
    other = (succ + rng.integers(1, V - 1, V)) % V  # never equal to succ
    if cfg.vocab == "gemma4":
        # Among 262k rows, random ones would often gather two or three embeddings, and such a
        # row outscores the right one for most tokens (see walk_successor): each disagreeing
        # token proposes its own token instead, one no agreeing token proposes.
        taken = np.zeros(V, bool)
        taken[succ[agree]] = True
        free, dis = np.flatnonzero(~taken), np.flatnonzero(~agree)
        other = succ.copy()
        other[dis] = free[rng.permutation(len(free))[:len(dis)]]
    sigma = np.where(agree, succ, other)
    pe = emb @ proj.T
    pe /= np.linalg.norm(pe, axis=1, keepdims=True)
    head = np.zeros((V, A), np.float32)
    np.add.at(head, sigma, pe * np.float32(20.0 / math.sqrt(A)))
    w.add_tensor("token_embd.weight", head)
    w.add_tensor("output_norm.weight", np.ones(A, np.float32))
    w.add_tensor("rope_freqs.weight", _rope_freqs(cfg.head_dim_full))
    for i, c in enumerate(cfg.drafter_layers):
        hd = cfg.head_dim_swa if c == "S" else cfg.head_dim_full
        H = cfg.drafter_head
        b = f"blk.{i}."
        _add_block(w, b, rng, A, hd, H, cfg.drafter_ff, ad)
    _finish(w)


def _half_matrices(w, ftype) -> None:
    """For F16 files, store matrices as float16 (norms and scales stay float32, as llama.cpp wants)."""
    import gguf

    if ftype != gguf.LlamaFileType.MOSTLY_F16:
        return
    add = w.add_tensor

    def add_half(name, arr, *a, **k):
        return add(name, arr.astype(np.float16) if arr.ndim == 2 else arr, *a, **k)

    w.add_tensor = add_half


def _add_block(w, b: str, rng, width: int, hd: int, heads: int, ff: int, post_scale, kv_heads: int = 0) -> None:
    """One transformer block's tensors (Gemma 4 naming). Layers that own a KV cache get K and
    V projections (kv_heads > 0); KV-sharing layers and the drafter's Q-only layers do not.
    `post_scale` weights the post-norms: how far the block moves the residual stream."""
    w.add_tensor(b + "attn_norm.weight", np.ones(width, np.float32))
    w.add_tensor(b + "attn_q.weight", _rand(rng, (hd * heads, width), 1 / math.sqrt(width)))
    if kv_heads:
        w.add_tensor(b + "attn_k.weight", _rand(rng, (hd * kv_heads, width), 1 / math.sqrt(width)))
        w.add_tensor(b + "attn_v.weight", _rand(rng, (hd * kv_heads, width), 1 / math.sqrt(width)))
        w.add_tensor(b + "attn_k_norm.weight", np.ones(hd, np.float32))
    w.add_tensor(b + "attn_output.weight", _rand(rng, (width, hd * heads), 1 / math.sqrt(hd * heads)))
    w.add_tensor(b + "attn_q_norm.weight", np.ones(hd, np.float32))
    w.add_tensor(b + "post_attention_norm.weight", np.full(width, post_scale, np.float32))
    w.add_tensor(b + "layer_output_scale.weight", np.ones(1, np.float32))
    w.add_tensor(b + "ffn_norm.weight", np.ones(width, np.float32))
    w.add_tensor(b + "ffn_gate.weight", _rand(rng, (ff, width), 1 / math.sqrt(width)))
    w.add_tensor(b + "ffn_up.weight", _rand(rng, (ff, width), 1 / math.sqrt(width)))
    w.add_tensor(b + "ffn_down.weight", _rand(rng, (width, ff), 1 / math.sqrt(ff)))
    w.add_tensor(b + "post_ffw_norm.weight", np.full(width, post_scale, np.float32))


def _finish(w) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _quantize(src: Path, dst: Path, qtype: str) -> None:
    import llama_cpp

    from ..local.llama import ensure_backend

    ensure_backend()  # routes llama.cpp's per-tensor log through our quiet filter
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{qtype}")
    params.nthread = 0
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), params)
    if rc != 0:
        raise RuntimeError(f"quantizing {src.name} to {qtype} failed ({rc})")


PROJECTOR = {"n_embd": 32, "n_head": 2, "n_ff": 64, "layers": 2, "patch": 4, "merge": 3, "pos": 256}
AUDIO = {"n_embd": 32, "n_head": 2, "n_ff": 64, "layers": 1, "n_mel": 128, "conv_ch": 8, "kernel": 5}


def write_projector(path: Path, n_embd_text: int, seed: int = 7, kind: str = "gemma4v", audio: bool = False) -> Path:
    """A synthetic Gemma 4 projector (`clip` GGUF) with random weights, shaped as llama.cpp's
    tools/mtmd reads it (clip.cpp's loader, models/gemma4v.cpp and gemma4a.cpp's graphs).
    Vision (gemma4v): patch embedding conv, 2-D learned position tables, a small ViT with
    per-head Q/K norms and Gemma 4's post norms, and the projection into the text width. With
    `audio`, also a gemma4a conformer (as E2B/E4B's projector has both): two stride-2 convs over
    the mel spectrogram, a block of half-step FFNs, chunked attention with relative positions,
    a depthwise conv module, and its own projection into the text width."""
    import gguf

    c = PROJECTOR
    d, H, ff, p = c["n_embd"], c["n_head"], c["n_ff"], c["patch"]
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), "clip")
    w.add_name("Tandem synthetic gemma4 projector")
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    if audio:  # two modalities: each names its projector type
        w.add_string("clip.vision.projector_type", kind)
        w.add_string("clip.audio.projector_type", "gemma4a")
    else:
        w.add_string("clip.projector_type", kind)
    w.add_bool("clip.has_vision_encoder", True)
    w.add_bool("clip.use_gelu", True)
    w.add_uint32("clip.vision.embedding_length", d)
    w.add_uint32("clip.vision.feed_forward_length", ff)
    w.add_uint32("clip.vision.block_count", c["layers"])
    w.add_uint32("clip.vision.attention.head_count", H)
    w.add_uint32("clip.vision.projection_dim", n_embd_text)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    w.add_uint32("clip.vision.image_size", 224)
    w.add_uint32("clip.vision.patch_size", p)
    w.add_uint32("clip.vision.projector.scale_factor", c["merge"])
    w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
    # numpy shapes are ggml's ne reversed
    w.add_tensor("v.patch_embd.weight", _rand(rng, (d, 3, p, p), 1 / math.sqrt(3 * p * p)))
    w.add_tensor("v.position_embd.weight", _rand(rng, (2, c["pos"], d), 0.1))
    for i in range(c["layers"]):
        b = f"v.blk.{i}."
        for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
            w.add_tensor(b + name + ".weight", _rand(rng, (d, d), 1 / math.sqrt(d)))
        w.add_tensor(b + "attn_q_norm.weight", np.ones(d // H, np.float32))
        w.add_tensor(b + "attn_k_norm.weight", np.ones(d // H, np.float32))
        for name in ("ln1", "ln2", "attn_post_norm", "ffn_post_norm"):
            w.add_tensor(b + name + ".weight", np.ones(d, np.float32))
        w.add_tensor(b + "ffn_up.weight", _rand(rng, (ff, d), 1 / math.sqrt(d)))
        w.add_tensor(b + "ffn_gate.weight", _rand(rng, (ff, d), 1 / math.sqrt(d)))
        w.add_tensor(b + "ffn_down.weight", _rand(rng, (d, ff), 1 / math.sqrt(ff)))
    w.add_tensor("mm.input_projection.weight", _rand(rng, (n_embd_text, d), 1 / math.sqrt(d)))
    if audio:
        _audio_encoder(w, n_embd_text, rng)
    _finish(w)
    return path


def _audio_encoder(w, n_embd_text: int, rng) -> None:
    a = AUDIO
    d, ff, ch, k = a["n_embd"], a["n_ff"], a["conv_ch"], a["kernel"]
    w.add_bool("clip.has_audio_encoder", True)
    w.add_uint32("clip.audio.embedding_length", d)
    w.add_uint32("clip.audio.feed_forward_length", ff)
    w.add_uint32("clip.audio.block_count", a["layers"])
    w.add_uint32("clip.audio.attention.head_count", a["n_head"])
    w.add_uint32("clip.audio.projection_dim", n_embd_text)
    w.add_float32("clip.audio.attention.layer_norm_epsilon", 1e-6)
    w.add_uint32("clip.audio.num_mel_bins", a["n_mel"])
    w.add_tensor("a.conv1d.0.weight", _rand(rng, (ch, 1, 3, 3), 1 / 3))
    w.add_tensor("a.conv1d.1.weight", _rand(rng, (ch, ch, 3, 3), 1 / math.sqrt(9 * ch)))
    freq = a["n_mel"] // 4  # after two stride-2 convs
    w.add_tensor("a.input_projection.weight", _rand(rng, (d, ch * freq), 1 / math.sqrt(ch * freq)))
    for i in range(a["layers"]):
        b = f"a.blk.{i}."
        for name in ("ffn_norm", "attn_pre_norm", "norm_conv", "ffn_norm_1", "ln2", "attn_post_norm"):
            w.add_tensor(b + name + ".weight", np.ones(d, np.float32))
        for name in ("ffn_up", "ffn_up_1"):
            w.add_tensor(b + name + ".weight", _rand(rng, (ff, d), 1 / math.sqrt(d)))
        for name in ("ffn_down", "ffn_down_1"):
            w.add_tensor(b + name + ".weight", _rand(rng, (d, ff), 1 / math.sqrt(ff)))
        for name in ("attn_q", "attn_k", "attn_v", "attn_out", "attn_k_rel", "conv_pw2"):
            w.add_tensor(b + name + ".weight", _rand(rng, (d, d), 1 / math.sqrt(d)))
        w.add_tensor(b + "conv_pw1.weight", _rand(rng, (2 * d, d), 1 / math.sqrt(d)))  # GLU: twice as wide
        w.add_tensor(b + "conv_dw.weight", _rand(rng, (d, k), 1 / math.sqrt(k)))  # causal depthwise, 4 left pad
    w.add_tensor("mm.a.input_projection.weight", _rand(rng, (n_embd_text, d), 1 / math.sqrt(d)))


def make_test_models(outdir: str | Path, size: str = "tiny", agreement: float = 1.0, vocab: str | None = None,
                     **overrides) -> tuple[Path, Path]:
    """Write `<tag>-target.gguf` and `<tag>-drafter-a<A>.gguf` into outdir; return both paths.

    `vocab`: "synthetic" or "gemma4" (Gemma 4's real tokenizer, fetched with the pinned
    llama-cpp-python sdist; raises VocabUnavailable when it cannot be); None: the size's own
    (synthetic for tiny, gemma4 for e2b). The tag is the size, then "-<vocab>" when the
    vocabulary is not the size's own, then "-custom" with overrides: tiny, tiny-gemma4, e2b,
    e2b-synthetic. A vocabulary that is not the size's own brings VOCAB_DEFAULTS (Gemma 4's:
    its real chat template). With the real vocabulary matrices are stored as F16 (a tiny pair
    is about 140 MB, not 270).

    The target does not depend on `agreement`, so several drafters can share one target.
    """
    import gguf

    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; choose from {', '.join(SIZES)}")
    if not 0.0 <= agreement <= 1.0:
        raise ValueError("agreement must be between 0 and 1")
    base = SIZES[size]
    vocab = vocab or base.vocab
    if vocab not in VOCABS:
        raise ValueError(f"unknown vocabulary {vocab!r}; choose from {', '.join(VOCABS)}")
    kw = dict(overrides)
    if vocab != base.vocab:
        kw = {**VOCAB_DEFAULTS[vocab], **kw}
    if vocab == "gemma4":
        n = gemma4_vocab().n_vocab
        if kw.get("n_vocab", n) != n:
            raise ValueError(f"Gemma 4's vocabulary has {n} tokens, not n_vocab={kw['n_vocab']}")
        kw["n_vocab"] = n
    cfg = replace(base, agreement=agreement, vocab=vocab, **kw)
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    tag = size + (f"-{vocab}" if vocab != base.vocab else "") + ("-custom" if overrides else "")
    target = out / f"{tag}-target.gguf"
    drafter = out / f"{tag}-drafter-a{agreement:g}.gguf"

    rng = np.random.default_rng(cfg.seed)
    emb = _embeddings(cfg, rng)
    rng_t = np.random.default_rng(cfg.seed + 1)
    # The drafter's randomness depends on the agreement so each value gets its own file.
    rng_d = np.random.default_rng([cfg.seed + 2, int(round(agreement * 1000))])
    half = bool(cfg.quantize) or cfg.vocab == "gemma4"  # 262k-row matrices: F16 (or quantized)
    ftype = gguf.LlamaFileType.MOSTLY_F16 if half else gguf.LlamaFileType.ALL_F32
    if half:  # both files see the embeddings as stored
        emb = emb.astype(np.float16).astype(np.float32)
    if cfg.quantize:
        tmp_t = out / (target.name + ".f16.tmp")
        tmp_d = out / (drafter.name + ".f16.tmp")
        try:
            if not (target.exists() and _tokenizer_model(target) == _tokenizer_model_of(cfg)):
                write_target(tmp_t, cfg, emb, rng_t, ftype)
                _quantize(tmp_t, target, cfg.quantize)
            write_drafter(tmp_d, cfg, emb, rng_d, ftype)
            _quantize(tmp_d, drafter, "Q8_0")
        finally:
            tmp_t.unlink(missing_ok=True)
            tmp_d.unlink(missing_ok=True)
    else:
        write_target(target, cfg, emb, rng_t, ftype)
        write_drafter(drafter, cfg, emb, rng_d, ftype)
    projector = out / f"mmproj-{tag}.gguf"  # found next to the target, as published repositories ship it
    if not projector.exists():  # pictures and audio, as E2B/E4B's projector has both
        write_projector(projector, cfg.n_embd, audio=True)
    return target, drafter


def _tokenizer_model_of(cfg: SynthConfig) -> str:
    return "gemma4" if cfg.vocab == "gemma4" else "llama"


def _tokenizer_model(path: Path) -> str | None:
    """tokenizer.ggml.model of a GGUF written earlier (a target kept from before is reused only
    when its vocabulary is the one asked for)."""
    try:
        return gguf_metadata(path).get("tokenizer.ggml.model", (b"", None))[1]
    except (OSError, ValueError, struct.error):
        return None
