"""Tandem's own clustered head for a drafter that comes without one (engine/models/draft_head.py):
every drafter GGUF on the Hub lacks the centroids (llama.cpp's converter drops them), and the
published checkpoint that has them (engine/models/centroids.py) needs the network. Here the
drafter's own head rows (its tied token embedding) are clustered: balanced spherical k-means,
every cluster the same size (the patched graph reads n_vocab / clusters rows per cluster as one block),
each centroid the mean of its rows, so a centroid's score is its tokens' mean logit.

Computed once per drafter file (one to two minutes on 2 cores for the E2B shape's 262,144 x 512) and kept as the
drafter written again with the head (drafter_file.write_clustered_drafter) in Tandem's data
folder, keyed by the file's place, size and time. Lossless like the published head: only how
often drafts are accepted changes (docs/speed.md measures both).

Hand-written, not scikit-learn's KMeans: that has no clusters of equal size, and the capacity
step below is most of what this needs."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Callable

import numpy as np

from .draft_head import DEFAULT_TOP_K

PER_CLUSTER = 128  # tokens per cluster, as the published E2B/E4B assistants (2,048 of 262,144)
# the full head's choice in the 32 best clusters: 97.0 % after 2 passes, 97.7 % after 4, 97.8 % after 8
# (the E2B shape, simulated)
ITERATIONS = 6
CANDIDATES = 8  # nearest clusters a row may go to before it takes any with room
_SLICE = 16384  # rows scored at once: the whole score matrix is 2 GB
MAX_VALUES = 1 << 29  # a head of more (2 GB as float32, twice over while clustering) is not clustered here


def head_rows(drafter: str | Path) -> np.ndarray:
    """The drafter's head rows, [n_vocab, width] float32 (its token embedding, dequantized)."""
    import gguf
    from gguf.quants import dequantize

    r = gguf.GGUFReader(drafter)
    t = next((t for t in r.tensors if t.name == "token_embd.weight"), None)
    if t is None or len(t.shape) != 2:
        raise ValueError(f"{Path(drafter).name} has no token_embd.weight of rows")
    if int(t.shape[0]) * int(t.shape[1]) > MAX_VALUES:
        raise ValueError(f"its head of {int(t.shape[1]):,} x {int(t.shape[0]):,} is too large to cluster here")
    rows = dequantize(t.data, t.tensor_type)
    return np.ascontiguousarray(rows.reshape(int(t.shape[1]), int(t.shape[0])), dtype=np.float32)


def _nearest(rows: np.ndarray, centroids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's k nearest centroids (squared distance, best first) and its best's margin."""
    half_norm = 0.5 * np.einsum("ij,ij->i", centroids, centroids)
    cand = np.empty((len(rows), k), np.int64)
    score = np.empty(len(rows), np.float32)
    for i in range(0, len(rows), _SLICE):
        sc = rows[i:i + _SLICE] @ centroids.T - half_norm  # larger = nearer
        top = np.argpartition(-sc, k, axis=1)[:, :k]
        ts = np.take_along_axis(sc, top, 1)
        order = np.argsort(-ts, axis=1)
        cand[i:i + _SLICE] = np.take_along_axis(top, order, 1)
        ts = np.take_along_axis(ts, order, 1)
        score[i:i + _SLICE] = ts[:, 0] - ts[:, 1]  # how much nearer its best is than its next
    return cand, score


def _assign(cand: np.ndarray, margin: np.ndarray, n_clusters: int) -> np.ndarray:
    """Each row's cluster, every cluster `per` rows: rows with the clearest choice first, each to
    its nearest candidate with room; what is left fills the room that is left."""
    V = len(cand)
    room = np.full(n_clusters, V // n_clusters)
    cluster = np.full(V, -1, np.int64)
    for j in np.argsort(-margin):
        for c in cand[j]:
            if room[c]:
                room[c] -= 1
                cluster[j] = c
                break
    rest = np.flatnonzero(cluster < 0)
    cluster[rest] = np.repeat(np.arange(n_clusters), room)[:len(rest)]
    return cluster


def default_clusters(n_vocab: int) -> int:
    return max(n_vocab // PER_CLUSTER, 2)


def balanced_kmeans(rows: np.ndarray, n_clusters: int, iterations: int = ITERATIONS,
                    seed: int = 0, progress: Callable[[int, int], None] | None = None):
    """(centroids [n_clusters, width] float32, ordering: the rows' ids cluster by cluster, int32)."""
    V = len(rows)
    if n_clusters < 2 or V % n_clusters:
        raise ValueError(f"{n_clusters:,} clusters do not divide {V:,} tokens evenly")
    # clustered by direction (spherical k-means), which the drafter's choice follows more than
    # length: the full head's choice fell in the best clusters more often so (on the E2B shape
    # 100 % of drafts accepted against 97.6 %, on the tiny 48-wide head 0.56 against 0.52)
    unit = rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), np.float32(1e-12))
    rng = np.random.default_rng(seed)
    centroids = unit[rng.choice(V, n_clusters, replace=False)].copy()
    k = min(CANDIDATES, n_clusters - 1)
    for it in range(iterations):
        cluster = _assign(*_nearest(unit, centroids, k), n_clusters)
        centroids = _means(unit, cluster, n_clusters)
        if progress:
            progress(it + 1, iterations)
    # each centroid the mean of its raw rows: its score is its tokens' mean logit
    return _means(rows, cluster, n_clusters), np.argsort(cluster, kind="stable").astype(np.int32)


def _means(rows: np.ndarray, cluster: np.ndarray, n_clusters: int) -> np.ndarray:
    sums = np.zeros((n_clusters, rows.shape[1]), np.float32)
    np.add.at(sums, cluster, rows)
    return sums / np.float32(len(rows) // n_clusters)


def kept_path(drafter: Path, kind: str) -> Path:
    """Where Tandem keeps `drafter` written again with a clustered head of `kind` ("clustered":
    the published one, "kmeans": its own), in its data folder, keyed by the file's place, size
    and time."""
    from .library import data_dir

    st = drafter.stat()
    key = hashlib.sha256(f"{drafter.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:12]
    return data_dir() / "drafters" / f"{drafter.stem}-{key}-{kind}.gguf"


def with_own_clusters(drafter: str | Path, n_clusters: int = 0, top_k: int = DEFAULT_TOP_K,
                      out: Path | None = None, progress: Callable[[int, int], None] | None = None) -> Path:
    """The drafter written again with Tandem's own clustered head of `n_clusters` (0: one per
    PER_CLUSTER tokens), `top_k` of them scored (at most all), at `out`, else in the data folder,
    where it is computed once; the drafter itself where it has a clustered head."""
    from .drafter_file import write_clustered_drafter
    from .gguf_info import read_gguf_info

    drafter = Path(drafter)
    info = read_gguf_info(drafter)
    if info.head_tensors:
        return drafter
    if not n_clusters:
        n_clusters = default_clusters(info.n_vocab)
        if top_k * 4 > n_clusters:  # it would score a quarter of the head or more: no gain to speak of
            raise ValueError(f"a head of {info.n_vocab:,} tokens is too small to gain from clusters")
    top_k = min(top_k, n_clusters)
    if top_k < 1:
        raise ValueError(f"cannot score {top_k} clusters")
    out = out or kept_path(drafter, "kmeans")
    if made_before(out, n_clusters, top_k):
        return out
    centroids, ordering = balanced_kmeans(head_rows(drafter), n_clusters, progress=progress)
    return write_clustered_drafter(drafter, out, centroids, ordering, top_k)


def made_before(out: Path, n_clusters: int, top_k: int) -> bool:
    """`out` is a drafter with a clustered head of these many clusters, `top_k` scored (else it
    is written again: other options were asked for)."""
    from .gguf_info import HEAD_TENSORS, read_gguf_info

    if not out.is_file():
        return False
    try:
        info = read_gguf_info(out)
    except Exception:  # a damaged file is written again
        return False
    cen = info.head_tensors.get(HEAD_TENSORS[0])
    return cen is not None and cen[0][1] == n_clusters and (info.centroid_top_k or DEFAULT_TOP_K) == top_k


def drafter_for_head(info, asked: str, progress: Callable[[int, int], None] | None = None) -> Path:
    """The drafter file to load for the head `asked` (`info`: the drafter's GGUFInfo, read
    already): a drafter without a clustered head gets
    Tandem's own where CLUSTERED is asked (computed now, once) or where AUTO finds it computed
    already (AUTO never computes: a minute's wait at load that nobody asked for); any other
    drafter is loaded as it is."""
    from .draft_head import AUTO, CLUSTERED, DraftHeadError

    drafter = info.path
    if asked not in (AUTO, CLUSTERED) or info.head_tensors:
        return drafter
    own = kept_path(drafter, "kmeans")
    if own.exists():
        return own
    if asked != CLUSTERED:
        return drafter
    try:
        return with_own_clusters(drafter, out=own, progress=progress)
    except ValueError as e:  # a vocabulary that does not divide into the clusters
        raise DraftHeadError(f"{drafter.name} has no clustered head and Tandem cannot make one: {e}") from None
