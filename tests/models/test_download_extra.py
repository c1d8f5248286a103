"""hf:// sources need huggingface_hub, the `download` extra, which `make run` does not install: a spec that needs it
is refused at plan time naming the extra, and the downloader says the same if it is reached anyway."""
from __future__ import annotations

import importlib.util
import sys

import pytest
import yaml

from boxes import MODEL
from ds4_converge.models import placement
from ds4_converge.spec.loader import load_spec


def _hf_spec(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({
        "engine": {"repo": str(tmp_path / "nowhere.git"), "ref": "v0.2.0", "target": "cpu"},
        "model": {"main": {"source": "hf://org/repo/model.gguf", "dest": str(tmp_path / "models")},
                  "mtp": str(MODEL)},
        "server": {"port": 1}, "paths": {"root": str(tmp_path / "root")}}))
    loaded = load_spec(path)
    return loaded, placement.placements(loaded.spec.model, lambda raw: tmp_path / raw, tmp_path / "models")


def test_without_huggingface_hub_an_hf_source_is_refused_naming_its_line_and_the_extra(tmp_path, monkeypatch):
    loaded, wanted = _hf_spec(tmp_path)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "huggingface_hub" else real(name, *a))
    hf, local = wanted
    message = placement.hub_missing(loaded, hf)
    line = next(n for n, text in enumerate(loaded.path.read_text().splitlines(), 1) if text.strip() == "main:")
    assert message.startswith(f"{loaded.path}:{line}:"), message
    assert ": model.main: hf://org/repo/model.gguf is an hf:// source" in message, message
    assert "pip install 'ds4-converge[download]'" in message, message
    assert placement.hub_missing(loaded, local) is None  # a local file needs no Hub


def test_with_huggingface_hub_nothing_is_said(tmp_path):
    pytest.importorskip("huggingface_hub")  # make test's venv has the extra
    loaded, (hf, _) = _hf_spec(tmp_path)
    assert placement.hub_missing(loaded, hf) is None


def test_the_downloader_says_the_same_when_reached_without_it(monkeypatch):
    from ds4_converge.models import download

    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import huggingface_hub raises ImportError
    with pytest.raises(download.DownloadError, match=r"the `download` extra installs: pip install 'ds4-converge"):
        download.hub()
