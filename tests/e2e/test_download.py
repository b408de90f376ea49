"""Downloads through huggingface_hub against a real local HTTP stand-in for the Hub."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.models.catalog import find
from engine.models.download import Downloader, DownloadCancelled, DownloadError, RemoteFile

from ..support.hubserver import Hub

REPO = "ggml-org/gemma-4-E2B-it-GGUF"
TARGET = "gemma-4-E2B-it-Q4_K_M.gguf"
DRAFTER = "MTP/gemma-4-E2B-it-MTP-Q8_0.gguf"


@pytest.fixture
def hub(tiny):
    h = Hub()
    h.add(REPO, TARGET, Path(tiny["target"]).read_bytes())
    h.add(REPO, "gemma-4-E2B-it-Q8_0.gguf", Path(tiny["target"]).read_bytes())  # another quant
    h.add(REPO, DRAFTER, Path(tiny[1.0]).read_bytes())
    h.add(REPO, "README.md", b"# model card\n")
    h.add("test/big", "blob.bin", os.urandom(6 * 2**20))
    h.start()
    yield h
    h.stop()


def dl(hub, tmp_path, **kw):
    return Downloader(endpoint=hub.url, cache_dir=tmp_path / "hf-cache", **kw)


def test_resolves_names_from_the_file_list_and_downloads_the_pair(hub, tmp_path, tiny):
    events = []
    res = dl(hub, tmp_path).download_pair(find("gemma-4-e2b"), "Q4_K_M", events.append)
    t, d = res.target, res.drafter
    assert t.name == TARGET and d.name == Path(DRAFTER).name
    assert t.read_bytes() == Path(tiny["target"]).read_bytes()
    assert str(tmp_path / "hf-cache") in str(t)  # into the (given) Hugging Face cache
    labels = {e.label for e in events}
    assert labels == {"target", "drafter"}
    for label in labels:
        ev = [e for e in events if e.label == label]
        assert [e.done for e in ev] == sorted(e.done for e in ev)  # monotonic
        assert ev[-1].done == ev[-1].total and ev[-1].fraction == 1.0
        assert ev[-1].speed > 0
    methods = {(m, p.rsplit("/", 1)[-1]) for m, p, _ in hub.requests}
    assert ("HEAD", TARGET) in methods and ("GET", TARGET) in methods


def test_download_into_a_chosen_folder(hub, tmp_path):
    res = Downloader(endpoint=hub.url, folder=tmp_path / "mine").download_pair(find("gemma-4-e2b"), "Q8_0")
    t, d = res.target, res.drafter
    assert t == tmp_path / "mine" / "gemma-4-E2B-it-Q8_0.gguf"
    assert d == tmp_path / "mine" / DRAFTER


def test_resumes_after_the_server_drops_the_connection(hub, tmp_path):
    hub.drop_once.add("test/big/blob.bin")
    f = RemoteFile("test/big", "blob.bin", len(hub.repos["test/big"]["blob.bin"]), None)
    path = dl(hub, tmp_path).download(f, "target")
    assert path.read_bytes() == hub.repos["test/big"]["blob.bin"]
    ranges = [r for m, p, r in hub.requests if m == "GET" and p.endswith("blob.bin") and r]
    assert ranges and int(ranges[0][6:].split("-")[0]) > 0  # it asked only for the missing part


def test_cancel_then_resume_later(hub, tmp_path):
    data = hub.repos["test/big"]["blob.bin"]
    f = RemoteFile("test/big", "blob.bin", len(data), None)
    hub.delay_per_chunk = 0.02
    d = dl(hub, tmp_path)
    seen = []

    def on_progress(p):
        seen.append(p.done)
        if p.done >= 2**20:
            d.cancel()

    with pytest.raises(DownloadCancelled):
        d.download(f, "target", on_progress)
    assert seen and seen[-1] < len(data)
    partial = list((tmp_path / "hf-cache").rglob("*.part"))
    assert partial and 0 < partial[0].stat().st_size < len(data)
    hub.delay_per_chunk = 0.0
    path = dl(hub, tmp_path).download(f, "target")  # a new downloader, as after a restart
    assert path.read_bytes() == data
    ranges = [r for m, p, r in hub.requests if m == "GET" and p.endswith("blob.bin") and r]
    assert ranges, "the second download should resume with a Range request"


def test_refuses_when_the_disk_is_too_small(hub, tmp_path):
    hub.fake_size[f"{REPO}/{TARGET}"] = 10**16  # 10 PB
    with pytest.raises(DownloadError, match="not enough disk space"):
        dl(hub, tmp_path).download_pair(find("gemma-4-e2b"), "Q4_K_M")
    assert not [p for m, p, _ in hub.requests if m == "GET" and p.endswith(".gguf")]


def test_detects_a_corrupted_file(hub, tmp_path):
    hub.corrupt.add(f"{REPO}/{TARGET}")
    with pytest.raises(DownloadError, match="checksum mismatch"):
        dl(hub, tmp_path).download_pair(find("gemma-4-e2b"), "Q4_K_M")
    assert not [p for p in (tmp_path / "hf-cache").rglob(TARGET) if p.exists()]


def test_gated_and_missing_repos_get_clear_errors(hub, tmp_path):
    hub.gated.add(REPO)
    with pytest.raises(DownloadError, match="gated.*hf auth login"):
        dl(hub, tmp_path).download_pair(find("gemma-4-e2b"), "Q4_K_M")
    with pytest.raises(DownloadError, match="not found"):
        dl(hub, tmp_path).download_pair(find("gemma-4-e4b"), "Q4_K_M")
    with pytest.raises(DownloadError, match="no Q3 build"):
        dl(hub, tmp_path).download_pair(find("gemma-4-e2b"), "Q3")


def test_offline_mode_uses_the_cache_and_refuses_the_network(hub, tmp_path, monkeypatch):
    f = RemoteFile("test/big", "blob.bin", len(hub.repos["test/big"]["blob.bin"]), None)
    dl(hub, tmp_path).download(f, "target")
    n = len(hub.requests)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = dl(hub, tmp_path).download(f, "target")  # from the cache, no request
    assert path.exists() and len(hub.requests) == n
    with pytest.raises(DownloadError, match="offline"):
        dl(hub, tmp_path).download_pair(find("gemma-4-e2b"), "Q4_K_M")
    other = RemoteFile(REPO, TARGET, 1, None)
    with pytest.raises(DownloadError, match="offline"):
        dl(hub, tmp_path).download(other, "target")
    assert len(hub.requests) == n


def test_cli_models_download_import_verify(hub, tmp_path):
    env = dict(os.environ, HF_ENDPOINT=hub.url, HF_HUB_CACHE=str(tmp_path / "hf-cache"),
               TANDEM_DATA_DIR=str(tmp_path / "data"))

    def tandem(*args):
        return subprocess.run([sys.executable, "-m", "app.main", "models", *map(str, args)],
                              capture_output=True, text=True, timeout=120, env=env)

    r = tandem("download", "gemma-4-e2b", "--quant", "Q4_K_M")
    assert r.returncode == 0, r.stderr
    # stderr is a pipe here: one line per finished file, no \r bars
    assert "target: gemma-4-E2B-it-Q4_K_M.gguf" in r.stderr and "done" in r.stderr and "MB/s" in r.stderr
    assert "\r" not in r.stderr
    r = tandem("verify")
    assert r.returncode == 0 and "ok" in r.stdout.lower()
    r = tandem("list")
    assert "gemma-4-e2b" in r.stdout and "downloaded" in r.stdout
    r = tandem("download", "gemma-4-nope")
    assert r.returncode == 2 and "unknown model" in r.stderr


def test_welcome_flow_downloads_and_starts_chatting(qtbot, hub, tmp_path, monkeypatch):
    from engine.models.library import Library

    from app.core.settings import Settings
    from app.core.store import Store
    from app.ui.dialogs.welcome import DownloadDialog, WelcomeDialog
    from app.ui.window import MainWindow
    from engine.models.hardware import Machine

    win = MainWindow(Settings(tmp_path / "settings.json"), Store(tmp_path / "chats.sqlite3"))
    qtbot.addWidget(win)
    assert win.session.model_info is None  # first run: nothing configured
    lib = Library(tmp_path / "models.json")
    args = {"endpoint": hub.url, "cache_dir": tmp_path / "hf-cache"}
    dlg = WelcomeDialog(win, args, lib, machine=Machine(ram_budget=16 * 10**9, cpu_bandwidth=20e9, gpu_name="test GPU",
                                                        gpu_budget=8 * 10**9, gpu_bandwidth=272e9,
                                                        description="test GPU: 8 GB free"))
    qtbot.addWidget(dlg)
    # 8 GB: E4B Q4_K_M (5.0 GB + drafter + KV) fits, the 12B does not
    assert dlg.current_model().name == "gemma-4-e4b"
    assert "does not fit" not in dlg.fit_label.text()
    dlg.model_box.setCurrentIndex(2)  # 12B: shows that it would spill
    assert "does not fit" in dlg.fit_label.text()
    dlg.model_box.setCurrentIndex(0)  # E2B, which the stand-in hub serves
    monkeypatch.setattr(DownloadDialog, "exec", lambda self: qtbot.waitUntil(
        lambda: self.result_paths is not None or self.error is not None, timeout=20000) or
        (DownloadDialog.Accepted if self.result_paths else DownloadDialog.Rejected))
    dlg.download()
    assert dlg.chosen and dlg.chosen[0].endswith(TARGET)
    bars = dlg.download_dialog.bars
    assert bars["target"].value() == 1000 and bars["drafter"].value() == 1000
    assert "MB/s" in dlg.download_dialog.labels["target"].text()
    assert lib.entries()[0].name == "gemma-4-e2b"
    # the window then loads the pair and chats with MTP on
    t, d = dlg.chosen
    win.load_models(t, d)
    qtbot.waitUntil(lambda: win.session.model_info is not None, timeout=20000)
    assert win.session.model_info.has_mtp
    win.input.setPlainText("hello")
    win.send()
    qtbot.waitUntil(lambda: not win.session.busy, timeout=20000)
    assert win.chat_view.widgets()[-1].stats["mode"] == "hybrid"
    win.close()


def test_download_dialog_cancel(qtbot, hub, tmp_path):
    from engine.models.library import Library

    from app.ui.dialogs.welcome import DownloadDialog

    hub.delay_per_chunk = 0.05
    hub.add(REPO, "gemma-4-E2B-it-Q5_K_M.gguf", os.urandom(4 * 2**20))
    model = find("gemma-4-e2b")
    model = type(model)(**{**model.__dict__, "quants": {"Q5_K_M": 4 * 2**20}})
    dlg = DownloadDialog(Downloader(endpoint=hub.url, cache_dir=tmp_path / "c"), model, "Q5_K_M",
                         Library(tmp_path / "m.json"))
    qtbot.addWidget(dlg)
    dlg.show()
    dlg.start()
    qtbot.waitUntil(lambda: dlg.bars["target"].value() > 0, timeout=20000)
    dlg.cancel()
    qtbot.waitUntil(lambda: dlg.error is not None, timeout=20000)
    assert "Cancelled" in dlg.status.text() and dlg.result_paths is None
    assert not dlg.thread.isRunning()


@pytest.mark.parametrize("name", [
    "../../evil-Q4_K_M.gguf",
    "MTP/../../../evil-MTP.gguf",
    "/tmp/evil-Q4_K_M.gguf",
    "sub/./evil-Q4_K_M.gguf",
    "C:\\evil-Q4_K_M.gguf",
])
def test_hostile_listing_names_are_refused_before_touching_the_disk(hub, tmp_path, tiny, name):
    hub.add(REPO, name, Path(tiny["target"]).read_bytes())
    for folder in (tmp_path / "mine", None):
        d = Downloader(endpoint=hub.url, folder=folder, cache_dir=tmp_path / "hf-cache")
        with pytest.raises(DownloadError, match="unsafe file name"):
            d.download_pair(find("gemma-4-e2b"), "Q4_K_M")
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written == [] and not Path("/tmp/evil-Q4_K_M.gguf").exists()
    assert not [r for r in hub.requests if r[0] == "GET" and r[1].endswith(".gguf")]


@pytest.mark.parametrize("headers,words", [
    ({"ETag": '"../../../escaped"'}, "invalid etag"),
    ({"ETag": '"/tmp/escaped"'}, "invalid etag"),
    ({"X-Repo-Commit": "../../../../escaped"}, "invalid commit"),
    ({"X-Repo-Commit": "main"}, "invalid commit"),
])
def test_hostile_etag_or_commit_headers_are_refused(hub, tmp_path, headers, words):
    hub.header_override[f"{REPO}/{TARGET}"] = headers
    with pytest.raises(DownloadError, match=words):
        dl(hub, tmp_path).download_pair(find("gemma-4-e2b"), "Q4_K_M")
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]
    assert not (tmp_path.parent / "escaped").exists()


def test_cli_refuses_a_hostile_listing_with_exit_2(hub, tmp_path, tiny):
    hub.add(REPO, "MTP/../../../evil-MTP.gguf", Path(tiny[1.0]).read_bytes())
    env = dict(os.environ, HF_ENDPOINT=hub.url, HF_HUB_CACHE=str(tmp_path / "hf-cache"),
               TANDEM_DATA_DIR=str(tmp_path / "data"))
    r = subprocess.run([sys.executable, "-m", "app.main", "models", "download", "gemma-4-e2b",
                        "--dir", str(tmp_path / "dl" / "here")], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 2 and "unsafe file name" in r.stderr
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]  # nothing written, nothing in the library


def test_unreachable_hub_fails_at_once_without_retry_storm(tmp_path):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, HF_ENDPOINT=f"http://127.0.0.1:{port}", HF_HUB_CACHE=str(tmp_path / "hf-cache"),
               TANDEM_DATA_DIR=str(tmp_path / "data"))
    r = subprocess.run([sys.executable, "-m", "app.main", "models", "download", "gemma-4-e2b"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 2
    assert "cannot reach the Hub" in r.stderr and "Retry" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_offline_first_run_says_so_at_once_and_offers_local_files(qtbot, tmp_path, monkeypatch):
    import socket

    from app.ui.dialogs.welcome import DownloadDialog, WelcomeDialog
    from engine.models.hardware import Machine
    from engine.models.library import Library

    with socket.socket() as s:  # a port nobody listens on: the Hub cannot be reached
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    machine = Machine(ram_budget=20e9, cpu_bandwidth=13e9, description="test CPU")
    dlg = WelcomeDialog(None, {"endpoint": f"http://127.0.0.1:{port}", "cache_dir": tmp_path / "c"},
                        Library(tmp_path / "m.json"), machine=machine)
    qtbot.addWidget(dlg)
    assert dlg.current_model().name == "gemma-4-e2b"  # what runs on a 2-core CPU
    offered = []

    def run_dialog(self):
        qtbot.waitUntil(lambda: self.error is not None, timeout=20000)
        offered.append((self.status.text(), not self.local_btn.isHidden()))
        self.local_btn.click()
        return DownloadDialog.Rejected

    monkeypatch.setattr(DownloadDialog, "exec", run_dialog)
    monkeypatch.setattr(DownloadDialog, "show", lambda self: None)
    chose_local = []
    monkeypatch.setattr(WelcomeDialog, "use_local", lambda self: chose_local.append(True))
    dlg.download()
    text, button = offered[0]
    assert "No connection to Hugging Face" in text and "on this computer" in text and "Errno" not in text.split("(")[0]
    assert button and chose_local == [True]


def test_download_progress_on_a_terminal_uses_tqdm_bars():
    import io

    from engine.models.cli import ProgressPrinter
    from engine.models.download import Progress

    class Tty(io.StringIO):
        def isatty(self):
            return True

    out = Tty()
    p = ProgressPrinter(out)
    for done in (0, 2**20, 3 * 2**20, 4 * 2**20):
        p(Progress("target", "dir/model-Q4_K_M.gguf", done, 4 * 2**20, 1e6, 1.0))
    text = out.getvalue()
    assert "model-Q4_K_M.gguf" in text and "100%" in text and "\r" in text


def test_the_projector_comes_with_the_pair_and_the_library_pairs_it(hub, tmp_path, tiny):
    from engine.models.library import Library
    from engine.testmodels import write_projector

    write_projector(tmp_path / "p.gguf", 64)
    write_projector(tmp_path / "wide.gguf", 96)
    hub.add(REPO, "mmproj-gemma-4-E2B-it-F16.gguf", (tmp_path / "p.gguf").read_bytes())
    d = dl(hub, tmp_path)
    plan = d.plan(find("gemma-4-e2b"), "Q4_K_M")
    assert plan.projector.path == "mmproj-gemma-4-E2B-it-F16.gguf"
    assert all("mmproj" not in f.path for f in plan.drafters)  # never a drafter
    res = d.download_plan(plan)
    assert res.projector is not None and res.projector.name == "mmproj-gemma-4-E2B-it-F16.gguf"
    lib = Library(tmp_path / "models.json")
    entry = lib.add("gemma-4-e2b", res.target, res.drafter, "download")
    assert entry.projector and entry.projector.endswith("mmproj-gemma-4-E2B-it-F16.gguf")
    # without pictures: not downloaded
    assert dl(hub, tmp_path / "b").download_plan(plan, vision=False).projector is None
    # a projector for another model width is refused and deleted; the pair still comes
    hub.add(REPO, "mmproj-gemma-4-E2B-it-F16.gguf", (tmp_path / "wide.gguf").read_bytes())
    d2 = dl(hub, tmp_path / "c")
    res2 = d2.download_plan(d2.plan(find("gemma-4-e2b"), "Q4_K_M"))
    assert res2.projector is None and res2.drafter is not None
    assert any("not usable for pictures" in n for n in res2.notes)
