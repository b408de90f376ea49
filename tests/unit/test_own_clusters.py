"""Tandem's own clustered head (engine/models/own_clusters.py): balanced k-means of a drafter's
head rows, every cluster the same size, each row's own cluster among the best its centroid
scores."""

from __future__ import annotations

import numpy as np
import pytest

from engine.models.own_clusters import balanced_kmeans, default_clusters


def grouped_rows(n_groups=64, per=32, width=48, seed=0):
    """Rows around n_groups directions (a trained head's rows gather so), shuffled."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((n_groups, width)).astype(np.float32) * 3
    rows = np.repeat(centers, per, axis=0) + rng.standard_normal((n_groups * per, width)).astype(np.float32)
    return rows[rng.permutation(len(rows))]


def test_every_cluster_holds_the_same_number_of_rows_and_each_row_is_listed_once():
    rows = grouped_rows()
    centroids, ordering = balanced_kmeans(rows, 64, iterations=4)
    assert centroids.shape == (64, 48) and centroids.dtype == np.float32
    assert ordering.dtype == np.int32 and sorted(ordering.tolist()) == list(range(len(rows)))
    # each centroid is the mean of its block of the ordering
    blocks = rows[ordering].reshape(64, 32, 48)
    assert np.allclose(centroids, blocks.mean(axis=1), atol=1e-4)


def test_a_rows_cluster_is_among_the_best_its_centroid_scores():
    """What the drafter does with a hidden state h: score the centroids, take the best few, and
    compute exact logits only for their rows; h near a row must find that row's cluster."""
    rows = grouped_rows()
    centroids, ordering = balanced_kmeans(rows, 64, iterations=6)
    cluster = np.empty(len(rows), np.int64)
    cluster[ordering] = np.repeat(np.arange(64), 32)
    top = np.argsort(-(rows @ centroids.T), axis=1)[:, :4]
    found = np.mean([cluster[i] in top[i] for i in range(len(rows))])
    assert found > 0.97, found


def test_a_vocabulary_the_clusters_do_not_divide_is_refused():
    with pytest.raises(ValueError, match="do not divide"):
        balanced_kmeans(grouped_rows()[:1000], 64)
    assert default_clusters(262144) == 2048 and default_clusters(512) == 4
