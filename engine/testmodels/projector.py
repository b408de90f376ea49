"""A synthetic Gemma 4 projector (`clip` GGUF): random weights shaped as llama.cpp's Gemma 4
vision encoder wants them, and optionally its audio (conformer) encoder."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from .writer import random_weights, write_out


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
    w.add_tensor("v.patch_embd.weight", random_weights(rng, (d, 3, p, p), 1 / math.sqrt(3 * p * p)))
    w.add_tensor("v.position_embd.weight", random_weights(rng, (2, c["pos"], d), 0.1))
    for i in range(c["layers"]):
        b = f"v.blk.{i}."
        for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
            w.add_tensor(b + name + ".weight", random_weights(rng, (d, d), 1 / math.sqrt(d)))
        w.add_tensor(b + "attn_q_norm.weight", np.ones(d // H, np.float32))
        w.add_tensor(b + "attn_k_norm.weight", np.ones(d // H, np.float32))
        for name in ("ln1", "ln2", "attn_post_norm", "ffn_post_norm"):
            w.add_tensor(b + name + ".weight", np.ones(d, np.float32))
        w.add_tensor(b + "ffn_up.weight", random_weights(rng, (ff, d), 1 / math.sqrt(d)))
        w.add_tensor(b + "ffn_gate.weight", random_weights(rng, (ff, d), 1 / math.sqrt(d)))
        w.add_tensor(b + "ffn_down.weight", random_weights(rng, (d, ff), 1 / math.sqrt(ff)))
    w.add_tensor("mm.input_projection.weight", random_weights(rng, (n_embd_text, d), 1 / math.sqrt(d)))
    if audio:
        _audio_encoder(w, n_embd_text, rng)
    write_out(w)
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
    w.add_tensor("a.conv1d.0.weight", random_weights(rng, (ch, 1, 3, 3), 1 / 3))
    w.add_tensor("a.conv1d.1.weight", random_weights(rng, (ch, ch, 3, 3), 1 / math.sqrt(9 * ch)))
    freq = a["n_mel"] // 4  # after two stride-2 convs
    w.add_tensor("a.input_projection.weight", random_weights(rng, (d, ch * freq), 1 / math.sqrt(ch * freq)))
    for i in range(a["layers"]):
        b = f"a.blk.{i}."
        for name in ("ffn_norm", "attn_pre_norm", "norm_conv", "ffn_norm_1", "ln2", "attn_post_norm"):
            w.add_tensor(b + name + ".weight", np.ones(d, np.float32))
        for name in ("ffn_up", "ffn_up_1"):
            w.add_tensor(b + name + ".weight", random_weights(rng, (ff, d), 1 / math.sqrt(d)))
        for name in ("ffn_down", "ffn_down_1"):
            w.add_tensor(b + name + ".weight", random_weights(rng, (d, ff), 1 / math.sqrt(ff)))
        for name in ("attn_q", "attn_k", "attn_v", "attn_out", "attn_k_rel", "conv_pw2"):
            w.add_tensor(b + name + ".weight", random_weights(rng, (d, d), 1 / math.sqrt(d)))
        w.add_tensor(b + "conv_pw1.weight", random_weights(rng, (2 * d, d), 1 / math.sqrt(d)))  # GLU: twice as wide
        w.add_tensor(b + "conv_dw.weight", random_weights(rng, (d, k), 1 / math.sqrt(k)))  # causal depthwise, 4 left pad
    w.add_tensor("mm.a.input_projection.weight", random_weights(rng, (n_embd_text, d), 1 / math.sqrt(d)))
