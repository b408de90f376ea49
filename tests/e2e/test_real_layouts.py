"""Downloads from a local hub that serves the published Gemma 4 repository layouts:
ggml-org (drafter `mtp-*` at the root, `mmproj-*` projectors beside it), unsloth (`MTP/`
folder, new and old names, a lowercase repository), Google's QAT targets without drafters plus
a community QAT drafter, a repository without any drafter, an underscore-arch drafter."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.local.engine import Engine
from engine.models.catalog import find, load_catalog
from engine.models.download import Downloader, DownloadError

from ..support.hubserver import Hub

pytestmark = pytest.mark.slow  # every catalog model and layout, downloaded and loaded
SIZE = {"gemma-4-e2b": "E2B", "gemma-4-e4b": "E4B", "gemma-4-12b": "12B", "gemma-4-26b-a4b": "26B-A4B",
        "gemma-4-31b": "31B"}
JUNK = b"GGUF" + b"\0" * 64  # a decoy: never a model anyone should download


@pytest.fixture
def files(tiny, tmp_path):
    t, d = Path(tiny["target"]).read_bytes(), Path(tiny[1.0]).read_bytes()
    projector = (Path(tiny["target"]).parent / "mmproj-tiny.gguf").read_bytes()
    return {"target": t, "drafter": d, "underscore": d.replace(b"gemma4-assistant", b"gemma4_assistant"),
            "projector": projector}


@pytest.fixture
def hub():
    h = Hub().start()
    yield h
    h.stop()


def ggml_layout(hub, files, model, drafter=None):
    s = SIZE[model]
    repo = f"ggml-org/gemma-4-{s}-it-GGUF"
    for q in ("Q4_K_M", "Q8_0", "Q4_0"):
        hub.add(repo, f"gemma-4-{s}-it-{q}.gguf", files["target"])
    hub.add(repo, f"mtp-gemma-4-{s}-it-Q8_0.gguf", drafter or files["drafter"])
    hub.add(repo, f"mtp-gemma-4-{s}-it-BF16.gguf", files["drafter"])
    hub.add(repo, f"mmproj-gemma-4-{s}-it-f16.gguf", files["projector"])
    hub.add(repo, "README.md", b"# card\n")
    return repo


def served(hub, suffix: str) -> list[str]:
    return [p.rsplit("/", 1)[-1] for m, p, _ in hub.requests if m == "GET" and p.endswith(suffix)]


@pytest.mark.parametrize("model", list(SIZE))
def test_every_catalog_model_downloads_a_pair_that_loads_with_mtp(hub, files, tmp_path, model):
    ggml_layout(hub, files, model)
    res = Downloader(endpoint=hub.url, cache_dir=tmp_path / "c").download_pair(find(model), "Q4_K_M")
    s = SIZE[model]
    assert res.target.name == f"gemma-4-{s}-it-Q4_K_M.gguf"
    assert res.drafter.name == f"mtp-gemma-4-{s}-it-Q8_0.gguf"  # Q8_0 before BF16, never mmproj
    assert res.projector.name == f"mmproj-gemma-4-{s}-it-f16.gguf"  # the picture reader, as itself
    e = Engine.load(res.target, res.drafter, mmproj=res.projector)
    try:
        assert e.has_mtp and e.projector.vision
    finally:
        e.close()


@pytest.mark.parametrize("model,repo,drafter_path", [
    ("gemma-4-e4b", "unsloth/gemma-4-E4B-it-GGUF", "MTP/mtp-gemma-4-E4B-it-Q8_0.gguf"),
    ("gemma-4-e2b", "unsloth/gemma-4-E2B-it-GGUF", "MTP/gemma-4-E2B-it-Q8_0-MTP.gguf"),  # older uploads
    ("gemma-4-12b", "unsloth/gemma-4-12b-it-GGUF", "MTP/mtp-gemma-4-12B-it-Q8_0.gguf"),  # lowercase repo
])
def test_unsloth_layouts_when_ggml_org_is_missing(hub, files, tmp_path, model, repo, drafter_path):
    hub.add(repo, f"gemma-4-{SIZE[model]}-it-Q4_K_M.gguf", files["target"])
    hub.add(repo, f"gemma-4-{SIZE[model]}-it-UD-Q4_K_M.gguf", files["target"])
    hub.add(repo, drafter_path, files["drafter"])
    hub.add(repo, "MTP/mtp-gemma-4-it-Q4_0.gguf", files["drafter"])
    hub.add(repo, "mmproj-F16.gguf", JUNK)
    res = Downloader(endpoint=hub.url, cache_dir=tmp_path / "c").download_pair(find(model), "Q4_K_M")
    assert res.target.name == f"gemma-4-{SIZE[model]}-it-Q4_K_M.gguf"
    assert res.drafter is not None and str(res.drafter).endswith(drafter_path)
    assert any("not found" in n for n in res.notes)  # ggml-org was tried first


def test_qat_target_gets_the_qat_drafter(hub, files, tmp_path):
    """Q4_0 exists only as Google's QAT file: the community QAT drafter is preferred over the
    non-QAT drafter in the ggml-org repository."""
    hub.add("ggml-org/gemma-4-E2B-it-GGUF", "gemma-4-E2B-it-Q8_0.gguf", files["target"])
    hub.add("ggml-org/gemma-4-E2B-it-GGUF", "mtp-gemma-4-E2B-it-Q8_0.gguf", files["drafter"])
    hub.add("google/gemma-4-E2B-it-qat-q4_0-gguf", "gemma-4-E2B_q4_0-it.gguf", files["target"])
    hub.add("amaranus/Gemma-4-E2B-it-qat-assistant-MTP-Q8_0-GGUF", "gemma-4-e2b-it-qat-assistant-q8_0.gguf",
            files["drafter"])
    res = Downloader(endpoint=hub.url, cache_dir=tmp_path / "c").download_pair(find("gemma-4-e2b"), "Q4_0")
    assert res.target.name == "gemma-4-E2B_q4_0-it.gguf"
    assert res.drafter.name == "gemma-4-e2b-it-qat-assistant-q8_0.gguf"


def test_no_drafter_anywhere_downloads_the_target_alone_and_says_why(hub, files, tmp_path):
    hub.add("google/gemma-4-31B-it-qat-q4_0-gguf", "gemma-4-31B_q4_0-it.gguf", files["target"])
    hub.add("google/gemma-4-31B-it-qat-q4_0-gguf", "mmproj-gemma-4-31B-f16.gguf", JUNK)
    res = Downloader(endpoint=hub.url, cache_dir=tmp_path / "c").download_pair(find("gemma-4-31b"), "Q4_0")
    assert res.target.name == "gemma-4-31B_q4_0-it.gguf" and res.drafter is None
    assert any("MTP is off" in n for n in res.notes)
    # a decoy projector is refused (and deleted) with the reason; the model still comes
    assert res.projector is None and any("not usable for pictures" in n for n in res.notes)


def test_underscore_drafter_is_refused_and_the_next_one_used(hub, files, tmp_path):
    ggml_layout(hub, files, "gemma-4-e4b", drafter=files["underscore"])
    res = Downloader(endpoint=hub.url, cache_dir=tmp_path / "c").download_pair(find("gemma-4-e4b"), "Q4_K_M")
    assert res.drafter.name == "mtp-gemma-4-E4B-it-BF16.gguf"
    assert any("Q8_0" in n and "underscore" in n for n in res.notes)
    assert not list((tmp_path / "c").rglob("mtp-gemma-4-E4B-it-Q8_0.gguf"))  # the refused file is gone


def test_cli_download_by_repository_and_list(hub, files, tmp_path):
    ggml_layout(hub, files, "gemma-4-e4b")
    env = dict(os.environ, HF_ENDPOINT=hub.url, HF_HUB_CACHE=str(tmp_path / "hf-cache"),
               TANDEM_DATA_DIR=str(tmp_path / "data"))

    def tandem(*args):
        return subprocess.run([sys.executable, "-m", "app.main", "models", *args], capture_output=True,
                              text=True, timeout=120, env=env)

    r = tandem("download", "ggml-org/gemma-4-E4B-it-GGUF:Q8_0")
    assert r.returncode == 0, r.stderr
    assert "gemma-4-E4B-it-Q8_0.gguf" in r.stdout and "mtp-gemma-4-E4B-it-Q8_0.gguf" in r.stdout
    r = tandem("list")
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if "gemma-4-e4b" in ln)
    assert "[downloaded]" in line and "GB" in line and ("fits" in line or "too big" in line)
    assert "tok/s" in r.stdout and "mixture-of-experts" in r.stdout
    rows = [ln.split() for ln in r.stdout.splitlines() if ln.strip().startswith("gemma-4-")]
    assert len(rows) == len(load_catalog())
    for row in rows:  # name, title..., size, "GB", fit, tok/s, k
        at = row.index("GB")
        assert float(row[at - 1]) > 0 and row[at + 1] in ("fits", "too") and float(row[at + 2 + (row[at + 1] == "too")]) > 0
    r = tandem("download", "ggml-org/no-such-repo:Q4_K_M")
    assert r.returncode == 2 and "not found" in r.stderr
    r = tandem("download", "../evil:Q4_K_M")
    assert r.returncode == 2 and "not a repository name" in r.stderr


def test_cli_download_without_drafter_says_mtp_is_off(hub, files, tmp_path):
    hub.add("someone/gemma-4-E2B-it-GGUF", "gemma-4-E2B-it-Q4_K_M.gguf", files["target"])
    env = dict(os.environ, HF_ENDPOINT=hub.url, HF_HUB_CACHE=str(tmp_path / "hf-cache"),
               TANDEM_DATA_DIR=str(tmp_path / "data"))
    r = subprocess.run([sys.executable, "-m", "app.main", "models", "download", "someone/gemma-4-E2B-it-GGUF"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert "MTP is off" in r.stdout and "MTP is off" in r.stderr


def test_unknown_quant_is_refused_with_the_choices(hub, tmp_path):
    with pytest.raises(DownloadError, match="choose one of"):
        Downloader(endpoint=hub.url, cache_dir=tmp_path / "c").download_pair(find("gemma-4-e2b"), "Q3_K_S")


@pytest.mark.parametrize("model", list(SIZE))
def test_welcome_dialog_downloads_every_catalog_model(qtbot, hub, files, tmp_path, monkeypatch, model):
    from app.ui.dialogs.welcome import DownloadDialog, WelcomeDialog
    from engine.models.hardware import Machine
    from engine.models.library import Library

    ggml_layout(hub, files, model)
    lib = Library(tmp_path / "models.json")
    machine = Machine(ram_budget=64e9, cpu_bandwidth=40e9, gpu_name="test GPU", gpu_budget=40e9,
                      gpu_bandwidth=1000e9, description="test GPU")
    dlg = WelcomeDialog(None, {"endpoint": hub.url, "cache_dir": tmp_path / "c"}, lib, machine=machine)
    qtbot.addWidget(dlg)
    assert "tok/s" in dlg.fit_label.text()
    dlg.model_box.setCurrentIndex([m.name for m in load_catalog()].index(model))
    monkeypatch.setattr(DownloadDialog, "exec", lambda self: qtbot.waitUntil(
        lambda: self.result_paths is not None or self.error is not None, timeout=20000) or
        (DownloadDialog.Accepted if self.result_paths else DownloadDialog.Rejected))
    dlg.download()
    t, d = dlg.chosen
    assert Path(t).name == f"gemma-4-{SIZE[model]}-it-Q4_K_M.gguf" and Path(d).name.startswith("mtp-")
    assert lib.entries()[0].name == model
    e = Engine.load(t, d)
    try:
        assert e.has_mtp
    finally:
        e.close()
