"""The Models page and the model picker: the library of local pairs with their details,
Load, Import, Remove (and delete files Tandem downloaded), and one-click switching."""

from __future__ import annotations

import shutil

from PySide6.QtWidgets import QMessageBox

from app.ui.model_picker import MANAGE
from app.ui.dialogs.models_dialog import ModelsDialog
from engine.models.hardware import Machine
from engine.models.library import Library

from ..support.window import TIMEOUT, make_window, send

SMALL = Machine(ram_budget=8 * 10**9, cpu_bandwidth=10e9, description="test machine: 8 GB")
TINY_MACHINE = Machine(ram_budget=10**9, cpu_bandwidth=10e9, description="test machine: 1 GB")


def _pair(tmp_path, tiny, name):
    d = tmp_path / name
    d.mkdir()
    t = shutil.copy(tiny["target"], d / "gemma-4-test-Q8_0.gguf")
    dr = shutil.copy(tiny[1.0], d / "gemma-4-test-assistant.gguf")
    return d, str(t), str(dr)


def test_library_details_quant_size_fit_and_problems(tmp_path, tiny):
    lib = Library(tmp_path / "models.json")
    d, t, dr = _pair(tmp_path, tiny, "a")
    lib.add("tiny pair", t, dr, "import")
    (d / "mmproj-test.gguf").write_bytes(b"not a projector")  # a name is not enough: headers are read
    lib.add("tiny pair", t, dr, "import")
    _, t2, dr2 = _pair(tmp_path, tiny, "b")
    lib.add("gone", t2, dr2, "download")
    shutil.rmtree(tmp_path / "b")
    rows = {r.entry.name: r for r in lib.details(SMALL)}
    ok = rows["tiny pair"]
    assert ok.problem is None and ok.fit == "fits" and ok.entry.projector is None
    assert ok.size == (d / "gemma-4-test-Q8_0.gguf").stat().st_size + (d / "gemma-4-test-assistant.gguf").stat().st_size
    assert ok.quant  # read from general.file_type
    assert "no such file" in rows["gone"].problem
    assert {r.entry.name: r.fit for r in lib.details(TINY_MACHINE)}["tiny pair"] in ("fits", "tight", "too big")
    # most recently used first
    lib.touch(t)
    assert lib.details(SMALL)[0].entry.name == "tiny pair" and lib.entries()[0].last_used > 0


def test_remove_deletes_only_what_tandem_downloaded(tmp_path, tiny):
    lib = Library(tmp_path / "models.json")
    _, t, dr = _pair(tmp_path, tiny, "mine")
    lib.add("mine", t, dr, "import")
    assert lib.remove(t, delete_files=True) == [] and (tmp_path / "mine" / "gemma-4-test-Q8_0.gguf").exists()
    _, t, dr = _pair(tmp_path, tiny, "dl")
    lib.add("dl", t, dr, "download")
    deleted = lib.remove(t, delete_files=True)
    assert len(deleted) == 2 and not list((tmp_path / "dl").glob("*.gguf")) and lib.entries() == []


def test_models_page_lists_loads_imports_and_removes(qtbot, tmp_path, tiny, gemma3_path, monkeypatch):
    lib = Library(tmp_path / "models.json")
    _, t, dr = _pair(tmp_path, tiny, "a")
    lib.add("tiny pair", t, dr, "import")
    dlg = ModelsDialog(lib, SMALL, current=t)
    qtbot.addWidget(dlg)
    assert dlg.table.rowCount() == 1
    cells = [dlg.table.item(0, c).text() for c in range(dlg.table.columnCount())]
    assert cells[0] == "tiny pair  (loaded)" and cells[2] == "gemma-4-test-assistant.gguf" and cells[5] == "fits"
    # importing a file that is not Gemma 4: one line says why, no list of every file in the folder
    shown = []
    monkeypatch.setattr("app.ui.dialogs.models_dialog.message", lambda p, icon, title, text, *a: shown.append(text))
    dlg.import_path(gemma3_path)
    assert len(shown) == 1 and "only for Gemma 4" in shown[0] and shown[0].count("\n") <= 3
    assert dlg.table.rowCount() == 2 and dlg.selected().entry.drafter is None
    loads = []
    dlg.load_requested.connect(lambda a, b: loads.append((a, b)))
    dlg.table.selectRow([r.entry.name for r in dlg.rows].index("tiny pair"))
    dlg.load_selected()
    assert loads == [(str(tmp_path / "a" / "gemma-4-test-Q8_0.gguf"), str(tmp_path / "a" / "gemma-4-test-assistant.gguf"))]
    # Remove (an imported pair): off the list, files kept
    monkeypatch.setattr(QMessageBox, "exec", lambda box: box.buttons()[[b.text() for b in box.buttons()]
                                                                      .index("Remove from the list")].click())
    dlg.remove()
    assert dlg.table.rowCount() == 1 and (tmp_path / "a" / "gemma-4-test-Q8_0.gguf").exists()


def test_picker_switches_models_with_one_click(qtbot, tmp_path, tiny):
    win = make_window(qtbot, tmp_path, tiny["target"], tiny[0.7])
    # the pair loaded at start was put in the library and is the picker's current entry
    assert win.library.find(tiny["target"]) is not None
    assert win.picker.currentData()[0] == str(tiny["target"])
    _, t, dr = _pair(tmp_path, tiny, "other")
    win.library.add("other pair", t, dr, "import")
    win.picker.refresh()
    i = win.picker.findText("other pair")
    win.picker.activated.emit(i)  # one click
    qtbot.waitUntil(lambda: win.session.model_info is not None and win.session.model_info.target == t, timeout=TIMEOUT)
    assert win.settings["target"] == t and win.picker.currentText().startswith("other pair")
    assert send(qtbot, win, "hello").stats["mode"] == "hybrid"
    opened = []
    win.picker.manage.disconnect()
    win.picker.manage.connect(lambda: opened.append(True))
    win.picker.activated.emit(win.picker.findData(MANAGE))
    assert opened and win.picker.currentText().startswith("other pair")  # stays on the loaded model
    win.close()
