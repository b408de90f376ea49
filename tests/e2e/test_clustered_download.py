"""A drafter from the Hub gets its clustered head from its published checkpoint: the GGUF (as
llama.cpp's converter writes it, without the centroids) is downloaded, then only the centroids
and token ordering of the assistant's safetensors are read, by ranged requests, and Tandem
writes the drafter with them (engine/models/centroids.py, drafter_file.py) — against a real
local stand-in for the Hub."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import gguf
import numpy as np
import pytest

from engine.local.engine import Engine, GenerationConfig
from engine.local.runtime import LoadOptions
from engine.models.catalog import find
from engine.models.download import Downloader
from engine.models.drafter_file import write_plain_drafter
from engine.models.gguf_info import read_gguf_info

from ..support.hubserver import Hub

pytestmark = pytest.mark.slow  # a 140 MB target through the local hub, twice
REPO = "ggml-org/gemma-4-E2B-it-GGUF"
ASSISTANT = "google/gemma-4-E2B-it-assistant"


def safetensors(tensors: dict[str, tuple[str, np.ndarray]]) -> bytes:
    """A safetensors file of (dtype name, array) by tensor name."""
    header, data = {"__metadata__": {"format": "pt"}}, b""
    for name, (dtype, a) in tensors.items():
        raw = (a.astype(np.float32).view(np.uint32) >> 16).astype("<u2").tobytes() if dtype == "BF16" else a.tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


def head_of(path):
    r = gguf.GGUFReader(path)
    return {t.name: np.array(t.data) for t in r.tensors if t.name.startswith("masked_embd")}


def drafts_clustered_as_the_baseline(res):
    """The downloaded pair drafts with a clustered head, its greedy output the baseline's."""
    e = Engine.load(res.target, res.drafter, LoadOptions(n_ctx=2048, n_threads=1, cache_disk_mib=0))
    try:
        assert e.draft_head.kind == "clustered"
        ask = e.format_chat([{"role": "user", "content": "Write a Python function that reverses a list."}])
        base = e.run(ask, GenerationConfig(max_tokens=24, spec="none")).tokens
        e.reset()
        r = e.run(ask, GenerationConfig(max_tokens=24, spec="mtp", draft_max=3))
        assert r.tokens == base and r.stats.accepted_tokens > 0
    finally:
        e.close()


@pytest.fixture(scope="module")
def hub(clustered, tmp_path_factory):
    """The E2B repository with a drafter as the Hub has them, and the assistant's checkpoint
    with the same centroids (in bfloat16, its token ordering int64, as published) beside a
    layer's weights that must not be read."""
    plain = write_plain_drafter(clustered["by_token"], tmp_path_factory.mktemp("hub") / "plain.gguf")
    head = head_of(clustered["by_token"])
    h = Hub()
    h.add(REPO, "gemma-4-E2B-it-Q4_K_M.gguf", clustered["target"].read_bytes())
    h.add(REPO, "MTP/gemma-4-E2B-it-MTP-Q8_0.gguf", plain.read_bytes())
    h.add(ASSISTANT, "config.json", json.dumps({"model_type": "gemma4_assistant", "use_ordered_embeddings": True,
                                                "num_centroids": 2048, "centroid_intermediate_top_k": 32}).encode())
    h.add(ASSISTANT, "model.safetensors", safetensors({
        "model.layers.0.self_attn.q_proj.weight": ("F32", np.random.default_rng(0).standard_normal((1024, 1024))),
        "masked_embedding.centroids.weight": ("BF16", head["masked_embd_centroids.weight"]),
        "masked_embedding.token_ordering": ("I64", head["masked_embd_ordering"].astype(np.int64)),
    }))
    h.start()
    yield h
    h.stop()


def test_a_hub_drafter_gets_its_clustered_head_from_the_checkpoint(hub, clustered, tmp_path):
    res = Downloader(endpoint=hub.url, cache_dir=tmp_path / "hf-cache").download_pair(find("gemma-4-e2b"), "Q4_K_M")
    info = read_gguf_info(res.drafter)
    assert info.head_ordered and set(info.head_tensors) == {"masked_embd_centroids.weight", "masked_embd_ordering"}, \
        res.notes
    assert res.drafter.parent == Path(os.environ["TANDEM_DATA_DIR"]) / "drafters"
    got, want = head_of(res.drafter), head_of(clustered["by_token"])
    assert np.array_equal(got["masked_embd_ordering"], want["masked_embd_ordering"])
    assert np.allclose(got["masked_embd_centroids.weight"], want["masked_embd_centroids.weight"], rtol=1e-2, atol=1e-2)
    # the checkpoint was read in ranges: its header and the two tensors (2.2 MB), not the layer's 4 MB
    ranges = [r for m, p, r in hub.requests if m == "GET" and p.endswith("model.safetensors")]
    assert ranges and all(r and r.startswith("bytes=") for r in ranges)
    read = sum(int(b) - int(a) + 1 for a, b in (r.removeprefix("bytes=").split("-") for r in ranges))
    head_bytes = want["masked_embd_ordering"].size * 8 + want["masked_embd_centroids.weight"].size * 2
    assert head_bytes < read < head_bytes + 4096, (read, head_bytes)
    drafts_clustered_as_the_baseline(res)


def test_without_a_checkpoint_the_drafter_gets_tandems_own_clustered_head_and_the_notes_say_why(hub, tmp_path):
    """The checkpoint is gone (or the machine is offline): Tandem clusters the downloaded drafter's
    head rows itself (engine/models/own_clusters.py), and the pair drafts with that head."""
    checkpoint = hub.repos.pop(ASSISTANT)
    try:
        res = Downloader(endpoint=hub.url, cache_dir=tmp_path / "hf-cache").download_pair(find("gemma-4-e2b"), "Q4_K_M")
    finally:
        hub.repos[ASSISTANT] = checkpoint
    assert res.drafter.name.startswith("gemma-4-E2B-it-MTP-Q8_0-") and res.drafter.name.endswith("-kmeans.gguf")
    assert res.drafter.parent == Path(os.environ["TANDEM_DATA_DIR"]) / "drafters"
    assert set(read_gguf_info(res.drafter).head_tensors) == {"masked_embd_centroids.weight", "masked_embd_ordering"}
    said = "Tandem clustered the drafter's head itself (k-means)"
    assert any(n.startswith("the drafter's clustered head:") and n.endswith(said) for n in res.notes), res.notes
    drafts_clustered_as_the_baseline(res)
