"""Fixtures of the model-source tests: a local fake hub, and other tools' empty model folders."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.clirun import FakeStdin
from tests.support.fakehub import FakeHub, serve, tiny_repo


@pytest.fixture
def hub_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    """A running fake hub, HF_HOME and SPECCHAT_HOME in tmp, nothing else of the user's."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HUB_OFFLINE", "SPECCHAT_NO_HUB",
                "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "SPECCHAT_CACHE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path / "home"))
    with serve(FakeHub(tiny_repo())) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        yield hub


@pytest.fixture
def trees(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """Empty ollama, LM Studio and llama.cpp folders, a specchat home of its own, and a folder
    `outside` every one of them; stdin a terminal with nothing typed."""
    home = tmp_path / "home"
    places = {"home": home, "ollama": tmp_path / "ollama", "llama": tmp_path / "llama-cache",
              "lmstudio": home / ".lmstudio" / "models", "specchat": tmp_path / "specchat",
              "outside": tmp_path / "outside"}
    for place in places.values():
        place.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("OLLAMA_MODELS", str(places["ollama"]))
    monkeypatch.setenv("LLAMA_CACHE", str(places["llama"]))
    monkeypatch.setenv("SPECCHAT_HOME", str(places["specchat"]))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setattr("sys.stdin", FakeStdin(b"", tty=True))
    return places
