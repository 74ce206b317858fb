"""A server's clients each learn their own verify prices: which batch sizes one client's
text makes must not steer what `auto` drafts for another."""

from __future__ import annotations

from pathlib import Path

import pytest

from specchat.backend.clients import Client
from specchat.backend.local import Runtime
from specchat.settings.load import LoadSettings
from tests.support.serve_fake_cli import open_fake


def test_one_clients_steps_leave_another_clients_prices_as_the_machines(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path))
    runtime = open_fake(LoadSettings())
    assert isinstance(runtime, Runtime)
    machine = runtime.auto.target_costs.seconds
    runtime.keep_clients_apart(None, "64M")
    alice = runtime.for_client(Client("alice"))
    assert isinstance(alice, Runtime)
    for _ in range(40):  # her drafts: batches of 4 far dearer than the machine's table
        alice.auto.target_costs.observe(1, machine[0])
        alice.auto.target_costs.observe(4, 5 * machine[3])
    assert alice.auto.target_costs.ratio(4) > 1.2 * machine[3] / machine[0]
    bob = runtime.for_client(Client("bob"))
    assert isinstance(bob, Runtime)
    assert bob.auto.target_costs.seconds == pytest.approx(machine)
    assert runtime.auto.target_costs.seconds == pytest.approx(machine)
