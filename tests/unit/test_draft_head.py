"""The drafter's head (engine/models/draft_head.py): which one a drafter file and this build
give, and why not the clustered one; and the synthetic clusters make-test-models writes."""

from __future__ import annotations

import re

import numpy as np
import pytest

from engine.models.draft_head import AUTO, CLUSTERED, FULL, DraftHeadError, choose_head
from engine.models.gguf_info import read_gguf_info
from engine.testmodels.writer import synthetic_clusters

V, A, C = 256, 16, 16  # tokens, drafter width, clusters of 16


def drafter_file(path, ordering=None, centroids=None, top_k=None, ordered=False):
    """A small gemma4-assistant GGUF with the clustered head's tensors that are given (`ordered`:
    its head's rows said to be stored in the clusters' order)."""
    import gguf

    w = gguf.GGUFWriter(str(path), "gemma4-assistant")
    w.add_embedding_length(A)
    w.add_token_list([f"t{i}" for i in range(V)])
    if top_k is not None:
        w.add_uint32("gemma4-assistant.centroid_intermediate_top_k", top_k)
    if ordered:
        w.add_bool("gemma4-assistant.masked_embd_ordered", True)
    w.add_tensor("token_embd.weight", np.zeros((V, A), np.float32))
    if centroids is not None:
        w.add_tensor("masked_embd_centroids.weight", centroids)
    if ordering is not None:
        w.add_tensor("masked_embd_ordering", ordering)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return read_gguf_info(path)


def permutation(seed=0):
    return np.random.default_rng(seed).permutation(V).astype(np.int32)


def test_a_sound_clustered_head_is_chosen_by_auto_and_says_how_much_it_scores(tmp_path):
    info = drafter_file(tmp_path / "d.gguf", permutation(), np.ones((C, A), np.float32), top_k=4)
    head = choose_head(AUTO, info, build_has_it=True)
    assert head.kind == CLUSTERED and (head.n_centroids, head.top_k, head.tokens) == (C, 4, 64)
    assert head.label == "clustered: 4 of 16 clusters (64 of 256 tokens)"
    assert head.as_dict()["clusters_scored"] == 4
    full = choose_head(FULL, info, build_has_it=True)
    assert full.kind == FULL and full.tokens == V and "as asked" in full.note
    # the published assistants' 32 where the file does not say
    unsaid = drafter_file(tmp_path / "e.gguf", permutation(), np.ones((64, A), np.float32))
    assert choose_head(AUTO, unsaid, build_has_it=True).top_k == 32


def test_a_drafter_without_centroids_has_the_full_head_and_refuses_clustered_by_name(tmp_path):
    info = drafter_file(tmp_path / "d.gguf")
    assert choose_head(AUTO, info, build_has_it=True).kind == FULL
    with pytest.raises(DraftHeadError, match="no clustered head"):
        choose_head(CLUSTERED, info, build_has_it=True)


@pytest.mark.parametrize("damage, why", [
    (lambda o, c: (np.where(o == 5, 6, o).astype(np.int32), c), "each token once"),
    (lambda o, c: (np.where(o == 5, V, o).astype(np.int32), c), "each token once"),
    (lambda o, c: (o[:-16].copy(), c), "one 32-bit token id per token"),
    (lambda o, c: (o.astype(np.float32), c), "one 32-bit token id per token"),
    (lambda o, c: (o, np.ones((C, A + 1), np.float32)), "not \\[16, clusters\\]"),
    (lambda o, c: (o, np.ones((15, A), np.float32)), "do not divide"),
    (lambda o, c: (o, None), "without masked_embd_centroids"),
])
def test_a_damaged_clustered_head_falls_back_to_the_full_head_with_the_reason(tmp_path, damage, why):
    ordering, centroids = damage(permutation(), np.ones((C, A), np.float32))
    info = drafter_file(tmp_path / "d.gguf", ordering, centroids, top_k=4)
    head = choose_head(AUTO, info, build_has_it=True)
    assert head.kind == FULL
    assert head.note.startswith("the full head: the drafter's clustered head is unusable")
    assert re.search(why, head.note), head.note
    with pytest.raises(DraftHeadError, match=why):
        choose_head(CLUSTERED, info, build_has_it=True)


def test_rows_stored_by_cluster_need_a_sound_ordering_even_for_the_full_head(tmp_path):
    """The full head puts such rows back in token order with the ordering: without a sound one
    the drafter cannot be used at all; with one, damaged centroids still leave the full head."""
    bad = np.where(permutation() == 5, 6, permutation()).astype(np.int32)
    info = drafter_file(tmp_path / "d.gguf", bad, np.ones((C, A), np.float32), top_k=4, ordered=True)
    for asked in (AUTO, FULL, CLUSTERED):
        with pytest.raises(DraftHeadError, match="stores its head's rows by cluster, but its ordering is not each token"):
            choose_head(asked, info, build_has_it=True)
    with pytest.raises(DraftHeadError, match="has no masked_embd_ordering"):
        choose_head(AUTO, drafter_file(tmp_path / "e.gguf", ordered=True), build_has_it=True)
    info = drafter_file(tmp_path / "f.gguf", permutation(), np.ones((15, A), np.float32), top_k=4, ordered=True)
    assert info.head_ordered and choose_head(AUTO, info, build_has_it=True).kind == FULL
    assert choose_head(AUTO, drafter_file(tmp_path / "g.gguf", permutation(), np.ones((C, A), np.float32), top_k=4,
                                          ordered=True), build_has_it=True).kind == CLUSTERED


def test_more_clusters_scored_than_there_are_is_refused(tmp_path):
    info = drafter_file(tmp_path / "d.gguf", permutation(), np.ones((C, A), np.float32), top_k=C + 1)
    assert "scores 17 of its 16 clusters" in choose_head(AUTO, info, True).note


def test_a_build_without_the_patch_cannot_load_a_drafter_with_centroids(tmp_path):
    """llama.cpp's own loader fails on the tensors' shapes: said before loading, with the fix."""
    info = drafter_file(tmp_path / "d.gguf", permutation(), np.ones((C, A), np.float32))
    for asked in (AUTO, FULL, CLUSTERED):
        with pytest.raises(DraftHeadError, match="packaging/install.sh"):
            choose_head(asked, info, build_has_it=False)
    assert choose_head(AUTO, drafter_file(tmp_path / "e.gguf"), build_has_it=False).kind == FULL


def test_synthetic_clusters_hold_each_proposal_among_the_best_clusters_of_its_proposer():
    """What makes make-test-models' clustered head propose what the full head does: the cluster
    of sigma(t) scores among the top_k for the drafter's hidden state at t (pe[t], a little
    noise), for nearly every t; and the ordering lists every token once, clusters of one size."""
    rng = np.random.default_rng(1)
    n, width, clusters, top_k = 8192, 128, 64, 4
    pe = rng.standard_normal((n, width)).astype(np.float32)
    pe /= np.linalg.norm(pe, axis=1, keepdims=True)
    sigma = rng.permutation(n)
    centroids, ordering = synthetic_clusters(pe, sigma, clusters, top_k, np.random.default_rng(2))
    assert centroids.shape == (clusters, width) and ordering.dtype == np.int32
    assert np.array_equal(np.sort(ordering), np.arange(n))
    cluster_of = np.empty(n, np.int64)
    cluster_of[ordering] = np.arange(n) // (n // clusters)
    h = pe + rng.standard_normal(pe.shape).astype(np.float32) * 0.05 / np.sqrt(width)
    best = np.argpartition(-(h @ centroids.T), top_k, axis=1)[:, :top_k]
    hit = (best == cluster_of[sigma][:, None]).any(axis=1).mean()
    assert hit > 0.97, hit
