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

vocab.py holds the vocabularies and templates, writer.py the shapes and the target's and
drafter's tensors, projector.py the vision/audio projector; `make_test_models` writes a pair,
and every public name of the three is importable from here.
"""

from __future__ import annotations

import struct
from dataclasses import replace
from pathlib import Path

import numpy as np

from .projector import AUDIO, PROJECTOR, write_projector
from .vocab import (CHAT_TEMPLATE, EXTRA_SPECIAL_TOKENS, GEMMA4_VOCAB, LLAMA_VERSION, SPECIAL_TOKENS, WORDS, RealVocab,
                    VocabUnavailable, chat_template, gemma4_vocab, gemma4_vocab_path, gguf_metadata, llama_src,
                    llama_src_cache, successor, vocabulary, walk_successor)
from .writer import (E2B, SIZES, TINY, VOCAB_DEFAULTS, VOCABS, SynthConfig, embeddings, quantize, successor_of,
                     write_drafter, write_target)

__all__ = ["AUDIO", "CHAT_TEMPLATE", "E2B", "EXTRA_SPECIAL_TOKENS", "GEMMA4_VOCAB", "LLAMA_VERSION", "PROJECTOR", "SIZES",
           "SPECIAL_TOKENS", "TINY", "VOCABS", "VOCAB_DEFAULTS", "WORDS", "RealVocab", "SynthConfig", "VocabUnavailable",
           "chat_template", "embeddings", "gemma4_vocab", "gemma4_vocab_path", "gguf_metadata", "llama_src",
           "llama_src_cache", "make_test_models", "quantize", "successor", "successor_of", "vocabulary",
           "walk_successor", "write_drafter", "write_projector", "write_target"]


def make_test_models(outdir: str | Path, size: str = "tiny", agreement: float = 1.0, vocab: str | None = None,
                     **overrides) -> tuple[Path, Path]:
    """Write `<tag>-target.gguf` and `<tag>-drafter-a<A>.gguf` into outdir; return both paths.

    `vocab`: "synthetic" or "gemma4" (Gemma 4's real tokenizer, fetched with the pinned
    llama-cpp-python sdist; raises VocabUnavailable when it cannot be); None: the size's own
    (synthetic for tiny, gemma4 for e2b). The tag is the size, then "-<vocab>" when the
    vocabulary is not the size's own, then "-custom" with overrides: tiny, tiny-gemma4, e2b,
    e2b-synthetic. A vocabulary that is not the size's own brings VOCAB_DEFAULTS. Every pair
    carries Gemma 4's real chat template (tools, thinking) unless `template="tandem"`. With the
    real vocabulary matrices are stored as F16 (a tiny pair is about 140 MB, not 270).

    The target does not depend on `agreement`, so several drafters can share one target.
    """
    cfg, tag = _config(size, agreement, vocab, overrides)
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{tag}-target.gguf"
    drafter = out / f"{tag}-drafter-a{agreement:g}.gguf"
    _write_pair(cfg, target, drafter)
    projector = out / f"mmproj-{tag}.gguf"  # found next to the target, as published repositories ship it
    if not projector.exists():  # pictures and audio, as E2B/E4B's projector has both
        write_projector(projector, cfg.n_embd, audio=True)
    return target, drafter


def _config(size: str, agreement: float, vocab: str | None, overrides: dict) -> tuple[SynthConfig, str]:
    """The pair's shape (a size, its vocabulary's defaults, the overrides) and its files' tag."""
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
    return cfg, size + (f"-{vocab}" if vocab != base.vocab else "") + ("-custom" if overrides else "")


def _write_pair(cfg: SynthConfig, target: Path, drafter: Path) -> None:
    """Both GGUFs; quantized ones are written as F16 first (a quantized target kept from before
    is reused when its vocabulary is the one asked for)."""
    import gguf

    rng = np.random.default_rng(cfg.seed)
    emb = embeddings(cfg, rng)
    rng_t = np.random.default_rng(cfg.seed + 1)
    # The drafter's randomness depends on the agreement so each value gets its own file.
    rng_d = np.random.default_rng([cfg.seed + 2, int(round(cfg.agreement * 1000))])
    half = bool(cfg.quantize) or cfg.vocab == "gemma4"  # 262k-row matrices: F16 (or quantized)
    ftype = gguf.LlamaFileType.MOSTLY_F16 if half else gguf.LlamaFileType.ALL_F32
    if half:  # both files see the embeddings as stored
        emb = emb.astype(np.float16).astype(np.float32)
    if not cfg.quantize:
        write_target(target, cfg, emb, rng_t, ftype)
        write_drafter(drafter, cfg, emb, rng_d, ftype)
        return
    tmp_t = target.parent / (target.name + ".f16.tmp")
    tmp_d = drafter.parent / (drafter.name + ".f16.tmp")
    try:
        if not (target.exists() and _tokenizer_model(target) == _tokenizer_model_of(cfg)):
            write_target(tmp_t, cfg, emb, rng_t, ftype)
            quantize(tmp_t, target, cfg.quantize)
        write_drafter(tmp_d, cfg, emb, rng_d, ftype)
        quantize(tmp_d, drafter, "Q8_0")
    finally:
        tmp_t.unlink(missing_ok=True)
        tmp_d.unlink(missing_ok=True)


def _tokenizer_model_of(cfg: SynthConfig) -> str:
    return "gemma4" if cfg.vocab == "gemma4" else "llama"


def _tokenizer_model(path: Path) -> str | None:
    """tokenizer.ggml.model of a GGUF written earlier (a target kept from before is reused only
    when its vocabulary is the one asked for)."""
    try:
        return gguf_metadata(path).get("tokenizer.ggml.model", (b"", None))[1]
    except (OSError, ValueError, struct.error):
        return None
