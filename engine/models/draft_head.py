"""The drafter's head: the full one (a logit for each of the 262,144 tokens) or the clustered one
of Gemma 4's E2B/E4B assistants, which score a few thousand cluster centroids, take the best
clusters and compute exact logits only for their tokens (the rest: -inf, draft probability 0).
The clustered head reads 1/64 of the head's rows, and the head is most of a small drafter's
step. The drafter file carries the two tensors (masked_embd_centroids, masked_embd_ordering);
llama.cpp declares them and never uses them, so Tandem's build patches its Gemma 4 assistant
graph (packaging/llama-cpp/gemma4-clustered-head.patch), which reads TANDEM_DRAFT_HEAD at load.

Verification is unchanged, so the head changes only how often drafts are accepted: greedy
output stays the baseline's and sampling stays exact (the draft distribution is the one the
clustered head proposed)."""

from __future__ import annotations

from dataclasses import dataclass

import gguf
import numpy as np

from ..errors import ModelFileError
from .gguf_info import HEAD_TENSORS, GGUFInfo

AUTO, FULL, CLUSTERED = "auto", "full", "clustered"
HEADS = (AUTO, FULL, CLUSTERED)
DEFAULT_TOP_K = 32  # the published assistants' centroid_intermediate_top_k
ENV = "TANDEM_DRAFT_HEAD"  # what the patched graph reads when the drafter loads
_NOT_WEIGHTS = {24, 25, 26, 27, 28}  # I8, I16, I32, I64, F64: no matrix product takes them


class DraftHeadError(ModelFileError):
    """A head this drafter or this build cannot give."""


@dataclass(frozen=True)
class DraftHead:
    """The head a loaded drafter computes."""

    kind: str  # FULL or CLUSTERED
    n_vocab: int
    n_centroids: int = 0  # the file's clusters (0: it has none)
    top_k: int = 0  # of them, scored exactly at each step
    note: str = ""  # why the full head where the file has clusters

    @property
    def tokens(self) -> int:
        """The tokens each step scores exactly."""
        if self.kind == CLUSTERED:
            return self.n_vocab // self.n_centroids * self.top_k
        return self.n_vocab

    @property
    def label(self) -> str:
        if self.kind == CLUSTERED:
            return (f"clustered: {self.top_k} of {self.n_centroids:,} clusters "
                    f"({self.tokens:,} of {self.n_vocab:,} tokens)")
        return f"full ({self.n_vocab:,} tokens)"

    def as_dict(self) -> dict:
        return {"head": self.kind, "tokens_scored": self.tokens, "vocabulary": self.n_vocab,
                "clusters": self.n_centroids, "clusters_scored": self.top_k if self.kind == CLUSTERED else 0}


def check_head(value: str) -> str:
    if value not in HEADS:
        raise ValueError(f"the drafter's head must be one of {', '.join(HEADS)} (got {value!r})")
    return value


def ordering_problem(info: GGUFInfo) -> str | None:
    """What makes a drafter's ordering unusable (None: nothing). Reads it (1 MB): a token id out
    of range would be a native abort inside llama.cpp, not an error."""
    order = info.head_tensors.get(HEAD_TENSORS[1])
    if order is None:
        return f"it has no {HEAD_TENSORS[1]}"
    dims, ttype, at = order
    if tuple(dims) != (info.n_vocab,) or ttype != gguf.GGMLQuantizationType.I32:
        return "its ordering is not one 32-bit token id per token"
    try:
        ids = np.fromfile(info.path, dtype="<i4", count=info.n_vocab, offset=at)
    except OSError as e:
        return f"its ordering cannot be read ({e})"
    if (len(ids) != info.n_vocab or ids.min() < 0 or ids.max() >= info.n_vocab
            or np.bincount(ids, minlength=info.n_vocab).max() != 1):
        return "its ordering is not each token once"
    return None


def clusters_problem(info: GGUFInfo) -> str | None:
    """What makes a drafter's clustered head unusable (None: nothing)."""
    cen = info.head_tensors.get(HEAD_TENSORS[0])
    if cen is None:
        return f"it has {HEAD_TENSORS[1]} without {HEAD_TENSORS[0]}"
    dims, ttype, _ = cen
    if len(dims) != 2 or dims[0] != info.n_embd or ttype in _NOT_WEIGHTS:
        return f"its centroids are {list(dims)}, not [{info.n_embd}, clusters] of weights"
    n_c = dims[1]
    if not 0 < n_c <= info.n_vocab or info.n_vocab % n_c:
        return f"its {n_c:,} clusters do not divide the {info.n_vocab:,} tokens evenly"
    top = info.centroid_top_k or DEFAULT_TOP_K
    if not 1 <= top <= n_c:
        return f"it scores {top} of its {n_c:,} clusters"
    return ordering_problem(info)


def choose_head(asked: str, info: GGUFInfo, build_has_it: bool) -> DraftHead:
    """The head to load the drafter with: `asked` (AUTO: the clustered head wherever the file
    has a sound one and this build computes it, as it reads 1/64 of the rows; else the full
    one). A head asked for by name that cannot be given raises DraftHeadError."""
    check_head(asked)
    V = info.n_vocab
    if info.head_tensors and not build_has_it:  # llama.cpp's own loader fails on the tensors' shapes
        raise DraftHeadError(f"{info.path.name} has a clustered head, which this llama.cpp build cannot load "
                             "(Tandem's patched build can: bash packaging/install.sh)")
    if info.head_ordered and (bad := ordering_problem(info)):  # the full head needs the ordering too
        raise DraftHeadError(f"{info.path.name} stores its head's rows by cluster, but {bad}: it cannot be used")
    if not info.head_tensors:
        if asked == CLUSTERED:
            raise DraftHeadError(f"{info.path.name} has no clustered head (no cluster centroids: only the E2B "
                                 "and E4B assistants carry them); use the full head")
        return DraftHead(FULL, V)
    problem = clusters_problem(info)
    if problem is not None:
        if asked == CLUSTERED:
            raise DraftHeadError(f"{info.path.name}: its clustered head is unusable: {problem}")
        return DraftHead(FULL, V, note=f"the full head: the drafter's clustered head is unusable ({problem})")
    n_c, top = info.head_tensors[HEAD_TENSORS[0]][0][1], info.centroid_top_k or DEFAULT_TOP_K
    if asked == FULL:
        return DraftHead(FULL, V, n_c, top, note="the full head, as asked")
    return DraftHead(CLUSTERED, V, n_c, top)
