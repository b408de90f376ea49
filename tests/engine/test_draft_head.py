"""The drafter's clustered head on llama.cpp's real graph (packaging/llama-cpp/
gemma4-clustered-head.patch): the tiny pair over Gemma 4's real 262,144-token vocabulary with
E2B/E4B's 2048 clusters of 128 tokens, 32 scored each draft step. It stays lossless (greedy
output is the baseline's, sampling keeps the target's distribution), it drafts what the full
head drafts (rows stored by cluster or in token order alike), and a damaged ordering falls
back to the full head, said."""

from __future__ import annotations

import shutil
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

from engine.local.engine import Engine, GenerationConfig
from engine.local.runtime import LoadOptions
from engine.models.draft_head import CLUSTERED, FULL, DraftHeadError
from engine.models.gguf_info import read_gguf_info
from engine.sampling import SamplingParams

from ..support.stats import chi2_pvalue

OPTS = LoadOptions(n_ctx=2048, n_threads=1, cache_disk_mib=0)
ASK = [{"role": "user", "content": "Write a Python function that reverses a list."}]


def load(pair, drafter="ordered", head="auto"):
    return Engine.load(pair["target"], pair[drafter], replace(OPTS, draft_head=head))


def drafted(e, k=3, n=40):
    e.reset()
    r = e.run(e.format_chat(ASK), GenerationConfig(max_tokens=n, spec="mtp", draft_max=k))
    return r.tokens, r.stats


def test_the_clustered_head_gives_the_baselines_greedy_output_and_drafts_like_the_full_head(clustered):
    e = load(clustered)
    try:
        assert e.draft_head.kind == CLUSTERED and e.draft_head.tokens == 32 * 128
        e.reset()
        base = e.run(e.format_chat(ASK), GenerationConfig(max_tokens=40, spec="none")).tokens
        tokens, stats = drafted(e)
        assert tokens == base
        assert stats.draft_head.startswith("clustered: 32 of 2,048 clusters")
        clustered_rate = stats.acceptance_rate
    finally:
        e.close()
    e = load(clustered, head=FULL)
    try:
        assert e.draft_head.kind == FULL
        tokens, stats = drafted(e)
        assert tokens == base and stats.draft_head.startswith("full")
        # the synthetic centroids hold the full head's proposal in the best clusters nearly always
        assert abs(stats.acceptance_rate - clustered_rate) <= 0.05, (stats.acceptance_rate, clustered_rate)
    finally:
        e.close()


@pytest.mark.parametrize("head", [CLUSTERED, FULL])
def test_rows_stored_by_cluster_draft_as_rows_in_token_order(clustered, head):
    """The same weights, the head's rows stored two ways (read as blocks by cluster, or gathered
    one by one; the full head put back in token order): the same drafts, step for step."""
    runs = []
    for drafter in ("ordered", "by_token"):
        e = load(clustered, drafter, head)
        try:
            tokens, stats = drafted(e, k=2, n=32)
            runs.append((tokens, stats.draft_tokens, stats.accepted_tokens, stats.accepted_at))
        finally:
            e.close()
    assert runs[0] == runs[1]


def test_sampling_with_the_clustered_head_keeps_the_targets_distribution(clustered):
    """The drafted positions of 300 seeded samples with the clustered head's drafts and without
    are one distribution (chi-square): tokens outside the chosen clusters have draft probability
    0, and rejection sampling with that distribution stays exact."""
    e = load(clustered)
    try:
        p = e.format_chat(ASK)
        sp = SamplingParams(temperature=3.0, top_k=8, top_p=1.0)
        arms = {}
        for spec in ("none", "mtp"):
            e.reset()
            arms[spec] = [tuple(e.run(p, GenerationConfig(max_tokens=3, spec=spec, draft_max=2, sampling=sp,
                                                            seed=seed)).tokens) for seed in range(300)]
        for pos in (1, 2):
            pv = chi2_pvalue(Counter(t[pos] for t in arms["none"]), Counter(t[pos] for t in arms["mtp"]))
            assert pv > 1e-3, (pos, pv)
    finally:
        e.close()


def test_a_damaged_ordering_falls_back_to_the_full_head_and_says_why(clustered, tmp_path):
    """A drafter whose ordering lists a token twice (rows in token order, so the full head does
    not need it): auto drafts with the full head and says why; clustered by name is refused."""
    bad = tmp_path / "bad-drafter.gguf"
    shutil.copy(clustered["by_token"], bad)
    _, _, at = read_gguf_info(bad).head_tensors["masked_embd_ordering"]
    ids = np.memmap(bad, dtype="<i4", mode="r+", offset=at, shape=(262144,))
    ids[5] = ids[6]
    ids.flush()
    del ids
    pair = {**clustered, "bad": bad}
    with pytest.raises(DraftHeadError, match="its ordering is not each token once"):
        load(pair, "bad", CLUSTERED)
    e = load(pair, "bad")
    try:
        assert e.draft_head.kind == FULL and "unusable (its ordering is not each token once)" in e.draft_head.note
        e.reset()
        base = e.run(e.format_chat(ASK), GenerationConfig(max_tokens=24, spec="none")).tokens
        tokens, stats = drafted(e, n=24)
        assert tokens == base and stats.accepted_tokens > 0
    finally:
        e.close()


def test_a_drafter_without_centroids_gets_tandems_own_clustered_head_once(clustered, tmp_path):
    """A drafter as the Hub has it (no centroids, rows in token order): asked for the clustered
    head, Tandem clusters its head rows itself (engine/models/own_clusters.py) into a copy kept
    in its data folder, which auto then finds; greedy output stays the baseline's, and most of
    the drafts the full head has accepted still are."""
    from engine.models.drafter_file import write_plain_drafter
    from engine.models.own_clusters import kept_path

    plain = write_plain_drafter(clustered["ordered"], tmp_path / "hub-drafter.gguf")
    pair = {**clustered, "plain": plain}
    e = load(pair, "plain", FULL)
    try:
        base = e.run(e.format_chat(ASK), GenerationConfig(max_tokens=40, spec="none")).tokens
        full_tokens, full = drafted(e)
        assert full_tokens == base
    finally:
        e.close()
    own = kept_path(plain, "kmeans")
    e = load(pair, "plain")  # auto, before any copy is made: the full head, nothing computed
    try:
        assert e.draft_head.kind == FULL and not own.exists()
    finally:
        e.close()
    steps = []
    e = Engine.load(pair["target"], plain, replace(OPTS, draft_head=CLUSTERED),
                    progress=lambda label, frac: steps.append((label, frac)))
    try:
        assert e.draft_head.kind == CLUSTERED and e.draft_head.tokens == 32 * 128
        assert ("drafter (clustering its head, once)", 1.0) in steps
        tokens, stats = drafted(e)
        assert tokens == base and stats.draft_head.startswith("clustered: 32 of 2,048 clusters")
        # k-means of this 48-wide head's 262k rows keeps most of the full head's proposals in the
        # best clusters (0.56 against 0.60 over 256 drafted tokens; the E2B shape's 97 %: docs/speed.md)
        assert stats.acceptance_rate >= 0.8 * full.acceptance_rate, (stats.acceptance_rate, full.acceptance_rate)
    finally:
        e.close()
    assert own.exists()
    made = own.stat().st_mtime_ns
    e = load(pair, "plain")  # auto: the copy made above, not made again
    try:
        assert e.draft_head.kind == CLUSTERED and own.stat().st_mtime_ns == made
    finally:
        e.close()


@pytest.mark.slow  # llama-server on a 262k vocabulary: a minute
def test_a_plain_copy_is_the_same_drafter_for_llama_cpps_own_build(clustered, tmp_path, llama_server_bin):
    """write_plain_drafter (benchmarks against llama-server on the same weights): without the
    clustered head's tensors, its head back in token order — the token-order file's rows byte for
    byte — and llama-server (llama.cpp's own build, which cannot load the original) drafts with it."""
    import gguf

    from engine.models.drafter_file import write_plain_drafter

    from ..support.llamaserver import LlamaServer

    plain = write_plain_drafter(clustered["ordered"], tmp_path / "plain.gguf")
    info = read_gguf_info(plain)
    assert not info.head_tensors and not info.head_ordered
    rows = {f: next(t for t in gguf.GGUFReader(f).tensors if t.name == "token_embd.weight").data
            for f in (plain, clustered["by_token"])}
    assert np.array_equal(*rows.values())
    import httpx2 as httpx

    srv = LlamaServer(llama_server_bin, clustered["target"], plain, log=tmp_path / "llama-server.log")
    try:
        r = httpx.post(srv.url + "/chat/completions", timeout=120,
                       json={"messages": ASK, "max_tokens": 24, "temperature": 0}).json()
    finally:
        srv.stop()
    assert r["timings"]["draft_n"] > 0 and r["timings"]["draft_n_accepted"] > 0, r.get("timings")


def test_tandem_serve_says_which_head_and_props_show_it(clustered):
    """`tandem serve --draft-head clustered`: its start line names the head and /props gives it
    (asked of a drafter without centroids, it clusters it first: the test above)."""
    import httpx2 as httpx

    from ..support.serve import Serve

    srv = Serve({"target": clustered["target"], 0.7: clustered["ordered"]}, "--draft-head", "clustered")
    try:
        head = httpx.get(srv.url.removesuffix("/v1") + "/props", timeout=10).json()["tandem"]["draft_head"]
        assert head == {"head": "clustered", "tokens_scored": 4096, "vocabulary": 262144, "clusters": 2048,
                        "clusters_scored": 32}
    finally:
        srv.stop()
    said = srv.proc.stdout.read().decode()
    assert "its head clustered: 32 of 2,048 clusters (4,096 of 262,144 tokens)" in said, said
