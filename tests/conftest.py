"""Shared fixtures.

Real-GGUF tests get their files through specchat's own pull code (specchat.models), the same
way a user does, so CI exercises the download path too. Where that code cannot deliver (not
importable yet, no network and no mirror), the tests skip and say why; set
SPECCHAT_REQUIRE_REAL_MODELS=1 (as CI may) to make that a failure instead.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from specchat.errors import SpecchatError
from tests.support.listener import Listener


def pytest_sessionstart(session: pytest.Session) -> None:
    """A suite started in the background (`cmd &`, `nohup`) inherits SIGINT and SIGHUP
    ignored, and so would every process it starts: the tests that interrupt a chat or an
    answer need them delivered the way a terminal delivers them."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _unavailable(reason: str) -> None:
    if os.environ.get("SPECCHAT_REQUIRE_REAL_MODELS"):
        pytest.fail(reason)
    pytest.skip(reason)


def _resolve(name: str) -> Path:
    try:
        from specchat.models import resolve_model
    except ImportError as exc:
        _unavailable(f"specchat.models.resolve_model is not importable ({exc}); "
                     f"cannot fetch the real model {name}")
        raise  # unreachable: skip/fail raise
    try:
        return resolve_model(name, quiet=True)
    except SpecchatError as exc:
        _unavailable(f"real model {name} could not be fetched by `specchat pull`: {exc}")
        raise


@pytest.fixture(scope="session")
def real_model_path() -> Callable[[str], Path]:
    """A factory: real_model_path("smollm2-135m") -> the cached GGUF file, pulled if needed."""
    found: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in found:
            found[name] = _resolve(name)
        return found[name]

    return get


@pytest.fixture
def listener() -> Iterator[Listener]:
    """A local TCP port that counts connections: a test asserts it saw none."""
    made = Listener()
    yield made
    made.close()


@pytest.fixture
def fake_ask_runtime(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """`specchat ask` opens a fake runtime (tests/support/fake_runtime.py) instead of models,
    with a terminal as stdin. The dict holds the `settings` it was opened with and the
    `runtime`; a test puts a fake model under "draft" before the run to give it one."""
    from specchat.commands import ask as ask_cmd
    from tests.support.clirun import FakeStdin
    from tests.support.fake_runtime import fake_runtime

    made: dict[str, Any] = {"draft": None}

    def open_fake(settings: Any) -> Any:
        made["settings"] = settings
        made["runtime"] = fake_runtime(draft=made["draft"])
        return made["runtime"]

    monkeypatch.setattr(ask_cmd, "open_runtime", open_fake)
    monkeypatch.setattr("sys.stdin", FakeStdin(b"", tty=True))
    yield made
