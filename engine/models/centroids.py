"""The clustered head's centroids and ordering from a drafter's published checkpoint (the
safetensors of google/gemma-4-E2B-it-assistant and -E4B-), for a drafter GGUF from the Hub, whose
converter dropped them (engine/models/draft_head.py). Only those two tensors are read, by ranged
requests of huggingface_hub's HTTP client: a few MB of a checkpoint of hundreds.

Everything read is untrusted: the safetensors header is bounded and parsed as JSON, the tensors'
types, shapes and sizes are checked, and the ordering must list each of the drafter's tokens
once before anything is written (drafter_file.write_clustered_drafter)."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import TandemError
from .hub_errors import hub_error

MAX_HEADER = 16 << 20  # a safetensors header of more is refused
MAX_CENTROIDS = 64 << 20  # bytes: 2048 x 2048 float32 is 16 MB
DEFAULT_TOP_K = 32  # the published assistants' centroid_intermediate_top_k
_DTYPES = {"F32": "<f4", "F16": "<f2", "BF16": "bf16", "I64": "<i8", "I32": "<i4"}


class ClustersUnavailable(TandemError):
    """The checkpoint has no usable clustered head (or cannot be read): draft with the full head."""


@dataclass
class Clusters:
    centroids: np.ndarray  # [clusters, drafter width], float32
    ordering: np.ndarray  # the tokens, cluster by cluster, int32
    top_k: int  # clusters scored exactly at each step


def _get(url: str, start: int, end: int, token) -> bytes:
    """Bytes start..end-1 of `url`, by a ranged request; exactly that many or an error."""
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    r = get_session().get(url, headers={**build_hf_headers(token=token), "Range": f"bytes={start}-{end - 1}"},
                          follow_redirects=True, timeout=30)
    hf_raise_for_status(r)
    if len(r.content) != end - start:
        raise ClustersUnavailable(f"the Hub sent {len(r.content)} bytes where {end - start} were asked for")
    return r.content


def _array(raw: bytes, dtype: str) -> np.ndarray:
    if dtype == "bf16":  # the upper half of a float32
        return (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
    return np.frombuffer(raw, dtype)


def _find(tensors: dict, suffix: str) -> tuple[str, dict]:
    hits = [(n, t) for n, t in tensors.items() if n != "__metadata__" and n.removesuffix(".weight").endswith(suffix)]
    if len(hits) != 1:
        raise ClustersUnavailable(f"the checkpoint has {len(hits)} tensors named *{suffix}, not one")
    return hits[0]


def fetch_clusters(repo: str, n_vocab: int, width: int, revision: str | None = None, endpoint: str | None = None,
                   token=None, cache_dir=None, filename: str = "model.safetensors") -> Clusters:
    """The clustered head of the checkpoint in `repo` for a drafter of `n_vocab` tokens and
    `width` dimensions; ClustersUnavailable says why there is none to use."""
    from huggingface_hub import hf_hub_download, hf_hub_url

    try:
        with open(hf_hub_download(repo, "config.json", revision=revision, endpoint=endpoint, token=token,
                                  cache_dir=cache_dir), "rb") as f:
            config = json.loads(f.read(1 << 20))
        if not config.get("use_ordered_embeddings", False):
            raise ClustersUnavailable(f"{repo}'s drafter has no clustered head (use_ordered_embeddings is off)")
        top_k = int(config.get("centroid_intermediate_top_k", DEFAULT_TOP_K))
        url = hf_hub_url(repo, filename, revision=revision, endpoint=endpoint)
        n = struct.unpack("<Q", _get(url, 0, 8, token))[0]
        if not 2 <= n <= MAX_HEADER:
            raise ClustersUnavailable(f"{filename} has a header of {n:,} bytes")
        tensors = json.loads(_get(url, 8, 8 + n, token))
        arrays = []
        for suffix in ("centroids", "token_ordering"):
            name, t = _find(tensors, suffix)
            start, end = (int(x) for x in t["data_offsets"])
            dtype = _DTYPES.get(t["dtype"])
            shape = tuple(int(x) for x in t["shape"])
            if dtype is None or not 0 <= start < end <= start + MAX_CENTROIDS:
                raise ClustersUnavailable(f"{name} is {t['dtype']} of {end - start:,} bytes")
            a = _array(_get(url, 8 + n + start, 8 + n + end, token), dtype)
            if a.size != int(np.prod(shape)):
                raise ClustersUnavailable(f"{name}'s {a.size:,} values are not its shape {list(shape)}")
            arrays.append(a.reshape(shape))
    except ClustersUnavailable:
        raise
    except (ValueError, KeyError, TypeError) as e:  # a file that is not what it says
        raise ClustersUnavailable(f"{repo}'s checkpoint could not be read ({type(e).__name__}: {e})") from None
    except Exception as e:  # the Hub's errors, in words
        raise ClustersUnavailable(str(hub_error(e, repo))) from None
    centroids, ordering = arrays
    ordering = ordering.reshape(-1)
    if centroids.ndim != 2 or centroids.shape[1] != width or n_vocab % max(centroids.shape[0], 1):
        raise ClustersUnavailable(f"{repo}'s centroids are {list(centroids.shape)}, not [clusters, {width}] "
                                  f"dividing {n_vocab:,} tokens")
    if (ordering.size != n_vocab or ordering.min() < 0 or ordering.max() >= n_vocab
            or np.bincount(ordering, minlength=n_vocab).max() != 1):
        raise ClustersUnavailable(f"{repo}'s token ordering does not list each of the drafter's {n_vocab:,} tokens once")
    if not 1 <= top_k <= centroids.shape[0]:
        raise ClustersUnavailable(f"{repo} scores {top_k} of its {centroids.shape[0]} clusters")
    return Clusters(centroids.astype(np.float32), ordering.astype(np.int32), top_k)


def with_clusters(drafter: Path, repo: str, notes: list, endpoint=None, token=None, cache_dir=None,
                  offline: bool = False) -> Path:
    """The downloaded `drafter` with its clustered head from its published checkpoint `repo`,
    as Tandem writes it (drafter_file.py) into its data folder, once for each drafter file; where
    the checkpoint cannot be had (offline, or the Hub refuses), Tandem's own clustering of the
    drafter's head (own_clusters.py; `notes` say why); the drafter itself where it has one already."""
    from .drafter_file import write_clustered_drafter
    from .gguf_info import read_gguf_info
    from .own_clusters import kept_path, with_own_clusters

    info = read_gguf_info(drafter)
    if info.head_tensors:
        return drafter
    out = kept_path(drafter, "clustered")
    if out.exists():
        return out
    why = "offline"
    if not offline:
        try:
            c = fetch_clusters(repo, info.n_vocab, info.n_embd, endpoint=endpoint, token=token, cache_dir=cache_dir)
            return write_clustered_drafter(drafter, out, c.centroids, c.ordering, c.top_k)
        except (ClustersUnavailable, OSError, ValueError) as e:
            why = str(e)
    # without the published head, Tandem's own clustering of the drafter's head rows
    try:
        own = with_own_clusters(drafter)
    except (OSError, ValueError) as e:
        notes.append(f"the drafter's clustered head: {why}, and Tandem could not cluster it ({e}); "
                     "it drafts with the full head")
        return drafter
    notes.append(f"the drafter's clustered head: {why}; Tandem clustered the drafter's head itself (k-means)")
    return own
