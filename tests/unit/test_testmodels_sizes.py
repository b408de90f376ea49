"""The shaped sizes `tandem make-test-models --size` offers carry each Gemma 4 size's structure
(the catalog's shapes): checked without writing a file."""

from __future__ import annotations

import pytest

from engine.cli.parser import build_parser
from engine.models.catalog import find
from engine.testmodels import SIZES


def test_the_command_offers_every_size_the_writer_knows():
    choices = next(a for a in build_parser()._subparsers._group_actions[0].choices["make-test-models"]._actions
                   if "--size" in a.option_strings).choices
    assert list(choices) == list(SIZES)


@pytest.mark.parametrize("size", ["e4b", "12b", "26b-a4b", "31b"])
def test_each_size_has_its_catalog_shape(size):
    cfg, shape = SIZES[size], find(f"gemma-4-{size}").shape
    assert len(cfg.layers) == shape["n_layer"]
    assert len(cfg.layers) - cfg.shared_kv_layers == shape["kv_layers"]
    assert all((c == "F") == ((i + 1) % shape["swa_every"] == 0) for i, c in enumerate(cfg.layers))
    assert cfg.n_swa == shape["n_swa"] and cfg.n_head_kv_swa == shape["n_head_kv"]
    assert (cfg.head_dim_swa, cfg.head_dim_full) == (shape["head_dim_swa"], shape["head_dim_full"])
    assert cfg.n_vocab == shape["n_vocab"] and cfg.vocab == "gemma4"
    assert cfg.n_embd < shape["n_embd"]  # narrower, said in writer.py
    assert (cfg.n_expert, cfg.n_expert_used) == ((128, 8) if size == "26b-a4b" else (0, 0))
    assert cfg.drafter_head % cfg.n_head_kv_swa == 0 and cfg.drafter_head % cfg.n_head_kv_full == 0
