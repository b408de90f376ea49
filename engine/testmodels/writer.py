"""The synthetic pair's shapes (`SynthConfig`, the sizes) and the GGUF writers of its target
and MTP drafter tensors (see the package's docstring for how the weights make acceptance
controllable), with the quantizing of a written file."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .vocab import chat_template, gemma4_vocab, successor, vocabulary, walk_successor

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
    double_wide: bool = False  # KV-sharing layers have a twice as wide MLP (E2B/E4B's use_double_wide_mlp)
    ple_width: int = 8
    softcap: float = 30.0
    n_ctx_train: int = 32768  # room for the bench suite of code edits (a file twice, char-level tokens)
    # a mixture of experts in every layer, beside its dense MLP (26B-A4B): experts, experts per
    # token, each expert's width (0: a dense model)
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_exp: int = 0
    drafter_embd: int = 32
    drafter_ff: int = 64
    drafter_head: int = 4
    drafter_layers: str = "SSSF"
    # the drafter's clustered head (E2B/E4B's assistants): this many clusters of n_vocab / n_centroids
    # tokens, the best `centroid_top_k` of them scored exactly (0: the full head only)
    n_centroids: int = 0
    centroid_top_k: int = 32
    # the head's rows stored in the clusters' order (each cluster's rows one block), as Tandem
    # writes a drafter for its clustered head; False: in token order, as llama.cpp's converter does
    ordered_head: bool = True
    alpha: float = 0.3  # target deviation from the successor rule
    alpha_dft: float = 0.1  # drafter noise (above ~0.3 it stops agreeing)
    agreement: float = 1.0
    # >= 0: the drafter agrees exactly on tokens with ids from this one up (and never below),
    # so a reply walking up the vocabulary turns predictable half-way (adaptive-k tests)
    agree_from: int = -1
    seed: int = 0
    quantize: str | None = None  # e.g. "Q4_0" for the target; drafter then gets Q8_0
    template: str = "gemma4"  # "gemma4": Gemma 4's real template (tools, thinking); "tandem": CHAT_TEMPLATE
    vocab: str = "synthetic"  # "synthetic": vocabulary(); "gemma4": Gemma 4's real tokenizer (n_vocab 262144)


TINY = SynthConfig()
# E2B-shaped, about 1 B parameters (1.4 B with the separate successor head): Gemma 4 E2B's
# width, head dims and 262k vocabulary, 16 layers without per-layer embeddings.
E2B = SynthConfig(
    n_vocab=262144, n_embd=1536, n_ff=6144, n_head=8, n_head_kv_swa=1, n_head_kv_full=1,
    head_dim_swa=256, head_dim_full=512, n_swa=512, layers="SSSF" * 4, shared_kv_layers=0,
    ple_width=0, drafter_embd=512, drafter_ff=2048, drafter_head=4, drafter_layers="SSSF",
    alpha=0.05, alpha_dft=0.05, quantize="Q4_0", template="gemma4", vocab="gemma4", n_centroids=2048,
)
# Every other size by its real structure (the catalog's shapes, resources/catalog.json): layer
# count and pattern (five sliding-window layers to each full one), window, heads, KV heads and
# head dims, KV-sharing layers and per-layer embeddings where the size has them, the 26B-A4B's
# 128 experts with 8 per token, Gemma 4's real 262k vocabulary. Only the widths are scaled down
# (n_embd and the MLPs: by 4 for E4B and 26B-A4B, 5 for 12B, 8 for 31B; the per-layer
# embeddings 256 -> 16), so a pair fits this machine's memory and decodes at tens of tokens a
# second on 2 cores. The attention (heads, KV heads and head dims kept) weighs more and the MLPs
# less than in the real models, the 262k-row head relatively more, as in E2B. The drafters are
# 256 wide with 4 layers and as many query heads as the KV caches they read have KV heads (GQA).
_BIG = dict(n_vocab=262144, head_dim_swa=256, head_dim_full=512, n_ctx_train=131072, drafter_embd=256,
            drafter_ff=1024, drafter_layers="SSSF", alpha=0.05, alpha_dft=0.05,
            quantize="Q4_0", template="gemma4", vocab="gemma4")
E4B = SynthConfig(n_embd=640, n_ff=2560, n_head=8, n_head_kv_swa=2, n_head_kv_full=2, n_swa=512,
                  layers="SSSSSF" * 7, shared_kv_layers=18, double_wide=True, ple_width=16, drafter_head=4,
                  n_centroids=2048, **_BIG)
G12B = SynthConfig(n_embd=768, n_ff=3072, n_head=16, n_head_kv_swa=8, n_head_kv_full=8, n_swa=1024,
                   layers="SSSSSF" * 8, shared_kv_layers=0, ple_width=0, drafter_head=8, **_BIG)
# the experts' width 704/4 = 176 rounded up to 192 and the dense MLP's 2112/4 = 528 down to 512:
# Q4_0 packs rows in blocks of 32
G26B_A4B = SynthConfig(n_embd=704, n_ff=512, n_head=16, n_head_kv_swa=8, n_head_kv_full=8, n_swa=1024,
                       layers="SSSSSF" * 5, shared_kv_layers=0, ple_width=0, n_expert=128, n_expert_used=8,
                       n_ff_exp=192, drafter_head=8, **_BIG)
G31B = SynthConfig(n_embd=672, n_ff=2688, n_head=32, n_head_kv_swa=16, n_head_kv_full=16, n_swa=1024,
                   layers="SSSSSF" * 10, shared_kv_layers=0, ple_width=0, drafter_head=16, **_BIG)
SIZES = {"tiny": TINY, "e2b": E2B, "e4b": E4B, "12b": G12B, "26b-a4b": G26B_A4B, "31b": G31B}
VOCABS = ("synthetic", "gemma4")
# What a vocabulary brings to a size whose own it is not (unless given): Gemma 4's real one
# brings smaller deviations (among 262k tokens a deviation of the tiny
# target's 0.3 often makes another token win: the walk would no longer be predictable), and
# a wider drafter (32 dimensions tell 262k tokens apart badly; llama.cpp wants it narrower
# than the target).
VOCAB_DEFAULTS = {"gemma4": {"alpha": 0.1, "alpha_dft": 0.05, "drafter_embd": 48}, "synthetic": {}}

def successor_of(cfg: SynthConfig) -> np.ndarray:
    return walk_successor(gemma4_vocab()) if cfg.vocab == "gemma4" else successor(cfg.n_vocab)


def random_weights(rng, shape, scale):
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


def embeddings(cfg: SynthConfig, rng) -> np.ndarray:
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
    ff = [cfg.n_ff * (2 if cfg.double_wide and i >= n_kv_from_start else 1) for i in range(L)]
    w.add_feed_forward_length(ff if cfg.double_wide else cfg.n_ff)
    if cfg.n_expert:
        w.add_expert_count(cfg.n_expert)
        w.add_expert_used_count(cfg.n_expert_used)
        w.add_expert_feed_forward_length(cfg.n_ff_exp)
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
        w.add_tensor("per_layer_token_embd.weight", random_weights(rng, (cfg.n_vocab, P * L), 1.0))
        w.add_tensor("per_layer_model_proj.weight", random_weights(rng, (P * L, d), 1 / math.sqrt(d)))
        w.add_tensor("per_layer_proj_norm.weight", np.ones(P, np.float32))
    for i, c in enumerate(cfg.layers):
        hd = cfg.head_dim_swa if c == "S" else cfg.head_dim_full
        H, K = cfg.n_head, kv[i]
        b = f"blk.{i}."
        _add_block(w, b, rng, d, hd, H, ff[i], a, kv_heads=K if i < n_kv_from_start else 0)
        if cfg.n_expert:
            _add_experts(w, b, rng, d, cfg.n_expert, cfg.n_ff_exp)
        if P:
            w.add_tensor(b + "inp_gate.weight", random_weights(rng, (P, d), 1 / math.sqrt(d)))
            w.add_tensor(b + "proj.weight", random_weights(rng, (d, P), 1 / math.sqrt(P)))
            w.add_tensor(b + "post_norm.weight", np.full(d, a, np.float32))
    write_out(w)


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
    pre = np.concatenate([proj, random_weights(rng, (A, d), float(ad) / math.sqrt(d))], axis=1)
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
    if cfg.n_centroids:
        head = _add_clustered_head(w, cfg, pe, sigma, head)
    w.add_tensor("token_embd.weight", head)
    w.add_tensor("output_norm.weight", np.ones(A, np.float32))
    w.add_tensor("rope_freqs.weight", _rope_freqs(cfg.head_dim_full))
    for i, c in enumerate(cfg.drafter_layers):
        hd = cfg.head_dim_swa if c == "S" else cfg.head_dim_full
        H = cfg.drafter_head
        b = f"blk.{i}."
        _add_block(w, b, rng, A, hd, H, cfg.drafter_ff, ad)
    write_out(w)


CODE_DIMS = 64  # the drafter's dimensions the synthetic centroids read


def synthetic_clusters(pe: np.ndarray, sigma: np.ndarray, n_centroids: int, top_k: int, rng):
    """Centroids [n_centroids, A] and the vocabulary grouped by cluster (I32, n_vocab / n_centroids
    tokens each) for the successor head: the drafter reading token t has a hidden state near
    pe[t] and proposes sigma(t), so sigma(t) joins a cluster whose centroid scores pe[t] among
    the best. The centroids are random directions in the last CODE_DIMS dimensions of the
    drafter's width, and each proposed token goes to the best-scoring cluster among its top_k
    that has room left (the clusters are all one size), surest tokens first; tokens no one
    proposes fill what room is left. So the top_k clusters of a drafting step hold its proposal
    for nearly every token (99.8 % in a simulation), as a trained drafter's do, and the clustered
    head proposes what the full one does about as often as `--agreement` says."""
    V, A = pe.shape
    m = min(CODE_DIMS, A)
    per = V // n_centroids
    g = rng.standard_normal((n_centroids, m)).astype(np.float32)
    g /= np.linalg.norm(g, axis=1, keepdims=True)
    proposer = np.full(V, -1, np.int64)
    proposer[sigma] = np.arange(V)
    proposed = np.flatnonzero(proposer >= 0)
    code = pe[proposer[proposed], A - m:]
    cand = np.empty((len(proposed), top_k), np.int64)
    best = np.empty(len(proposed), np.float32)
    for i in range(0, len(proposed), 16384):  # in slices: the whole score matrix is GBs
        sc = code[i:i + 16384] @ g.T
        top = np.argpartition(-sc, top_k, axis=1)[:, :top_k]
        ts = np.take_along_axis(sc, top, 1)
        order = np.argsort(-ts, axis=1)
        cand[i:i + 16384] = np.take_along_axis(top, order, 1)
        best[i:i + 16384] = ts.max(axis=1)
    room = np.full(n_centroids, per)
    cluster = np.full(V, -1, np.int64)
    for j in np.argsort(-best):
        for c in cand[j]:
            if room[c]:
                room[c] -= 1
                cluster[proposed[j]] = c
                break
    rest = np.flatnonzero(cluster < 0)
    cluster[rest] = np.repeat(np.arange(n_centroids), room)[:len(rest)]
    centroids = np.zeros((n_centroids, A), np.float32)
    centroids[:, A - m:] = g
    return centroids, np.argsort(cluster, kind="stable").astype(np.int32)


def _add_clustered_head(w, cfg: SynthConfig, pe: np.ndarray, sigma: np.ndarray, head: np.ndarray) -> np.ndarray:
    """The clustered head's tensors and keys (synthetic_clusters); the head's rows as they are to
    be stored: cluster by cluster where `cfg.ordered_head` (the patched graph reads each as one block)."""
    centroids, ordering = synthetic_clusters(pe, sigma, cfg.n_centroids, cfg.centroid_top_k,
                                             np.random.default_rng(cfg.seed + 3))
    w.add_uint32("gemma4-assistant.centroid_intermediate_top_k", cfg.centroid_top_k)
    w.add_tensor("masked_embd_centroids.weight", centroids)
    w.add_tensor("masked_embd_ordering", ordering)
    if not cfg.ordered_head:
        return head
    w.add_bool("gemma4-assistant.masked_embd_ordered", True)
    return head[ordering]


def _add_experts(w, b: str, rng, width: int, n_expert: int, ff: int) -> None:
    """A layer's mixture of experts (Gemma 4's MoE block, beside the dense MLP `_add_block`
    wrote): the router and its input scale, the experts' fused gate+up and down projections and
    their per-expert output scale, and the norms around both branches. Random routing: each
    token's top experts differ, so a batch of tokens reads more experts than one does. The two
    branches are normalized (post_ffw_norm_1/2) and their sum goes through post_ffw_norm, whose
    scale says how far the block moves the residual stream, as for a dense block."""
    w.add_tensor(b + "ffn_gate_inp.weight", random_weights(rng, (n_expert, width), 1.0))
    w.add_tensor(b + "ffn_gate_inp.scale", np.ones(width, np.float32))
    w.add_tensor(b + "pre_ffw_norm_2.weight", np.ones(width, np.float32))
    w.add_tensor(b + "post_ffw_norm_1.weight", np.ones(width, np.float32))
    w.add_tensor(b + "post_ffw_norm_2.weight", np.ones(width, np.float32))
    w.add_tensor(b + "ffn_gate_up_exps.weight", random_weights(rng, (n_expert, 2 * ff, width), 1 / math.sqrt(width)))
    w.add_tensor(b + "ffn_down_exps.weight", random_weights(rng, (n_expert, width, ff), 1 / math.sqrt(ff)))
    w.add_tensor(b + "ffn_down_exps.scale", np.ones(n_expert, np.float32))


def _half_matrices(w, ftype) -> None:
    """For F16 files, store matrices as float16 (norms and scales stay float32, as llama.cpp wants)."""
    import gguf

    if ftype != gguf.LlamaFileType.MOSTLY_F16:
        return
    add = w.add_tensor

    def add_half(name, arr, *a, **k):
        return add(name, arr.astype(np.float16) if arr.ndim >= 2 else arr, *a, **k)

    w.add_tensor = add_half


def _add_block(w, b: str, rng, width: int, hd: int, heads: int, ff: int, post_scale, kv_heads: int = 0) -> None:
    """One transformer block's tensors (Gemma 4 naming). Layers that own a KV cache get K and
    V projections (kv_heads > 0); KV-sharing layers and the drafter's Q-only layers do not.
    `post_scale` weights the post-norms: how far the block moves the residual stream."""
    w.add_tensor(b + "attn_norm.weight", np.ones(width, np.float32))
    w.add_tensor(b + "attn_q.weight", random_weights(rng, (hd * heads, width), 1 / math.sqrt(width)))
    if kv_heads:
        w.add_tensor(b + "attn_k.weight", random_weights(rng, (hd * kv_heads, width), 1 / math.sqrt(width)))
        w.add_tensor(b + "attn_v.weight", random_weights(rng, (hd * kv_heads, width), 1 / math.sqrt(width)))
        w.add_tensor(b + "attn_k_norm.weight", np.ones(hd, np.float32))
    w.add_tensor(b + "attn_output.weight", random_weights(rng, (width, hd * heads), 1 / math.sqrt(hd * heads)))
    w.add_tensor(b + "attn_q_norm.weight", np.ones(hd, np.float32))
    w.add_tensor(b + "post_attention_norm.weight", np.full(width, post_scale, np.float32))
    w.add_tensor(b + "layer_output_scale.weight", np.ones(1, np.float32))
    w.add_tensor(b + "ffn_norm.weight", np.ones(width, np.float32))
    w.add_tensor(b + "ffn_gate.weight", random_weights(rng, (ff, width), 1 / math.sqrt(width)))
    w.add_tensor(b + "ffn_up.weight", random_weights(rng, (ff, width), 1 / math.sqrt(width)))
    w.add_tensor(b + "ffn_down.weight", random_weights(rng, (width, ff), 1 / math.sqrt(ff)))
    w.add_tensor(b + "post_ffw_norm.weight", np.full(width, post_scale, np.float32))


def write_out(w) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def quantize(src: Path, dst: Path, qtype: str) -> None:
    import llama_cpp

    from ..local.llama import ensure_backend

    ensure_backend()  # routes llama.cpp's per-tensor log through our quiet filter
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{qtype}")
    params.nthread = 0
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), params)
    if rc != 0:
        raise RuntimeError(f"quantizing {src.name} to {qtype} failed ({rc})")
