"""The options schema: one declaration per option, parsed and checked the same everywhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from specchat.backend.loading import wants_draft
from specchat.engine.options import Spec
from specchat.errors import UsageError
from specchat.settings import file as config
from specchat.settings import schema as options
from specchat.settings.load import LoadSettings
from specchat.settings.schema import BY_NAME, NO_DRAFT, OptionError
from tests.support.together import run_together


def test_every_option_is_declared_once_with_a_valid_default() -> None:
    names = [o.name for o in options.OPTIONS]
    assert len(names) == len(set(names))
    for opt in options.OPTIONS:
        assert opt.validate(opt.default) == opt.default or opt.default is None
        assert opt.help.endswith(".") and opt.env == "SPECCHAT_" + opt.name.upper()


@pytest.mark.parametrize(("name", "text", "value"), [
    ("temperature", "0.7", 0.7), ("top_k", "40", 40), ("spec", "ngram", "ngram"),
    ("seed", "-1", -1), ("seed", "random", None), ("n_gpu_layers", "auto", None),
    ("n_gpu_layers", "12", 12), ("ctx", "0", 0), ("plain", "yes", True),
    ("stop", r"\n\n", ["\n\n"]), ("stop", '["a", "b"]', ["a", "b"]), ("system", " x ", " x "),
    ("draft", "none", "none"), ("draft", "None", "none"), ("draft", "default", None),
    ("prompt_cache", "500M", "500M"), ("prompt_cache", "off", "off"),
])
def test_text_values(name: str, text: str, value: object) -> None:
    assert BY_NAME[name].from_text(text) == value


@pytest.mark.parametrize("where", ["flag", "env", "file", "profile"])
def test_no_draft_means_the_same_from_every_source(where: str, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """`none` is no draft model wherever it is written (SPECCHAT_DRAFT=none used to load the
    preset's default draft, as if the option were unset)."""
    cfg = tmp_path / "config.toml"
    cfg.write_text({"file": 'draft = "none"\n', "profile": '[profile.p]\ndraft = "None"\n'}
                   .get(where, ""))
    monkeypatch.setenv("SPECCHAT_CONFIG", str(cfg))
    monkeypatch.delenv("SPECCHAT_DRAFT", raising=False)
    if where == "env":
        monkeypatch.setenv("SPECCHAT_DRAFT", "none")
    flags = {"draft": BY_NAME["draft"].accept("none")} if where == "flag" else {}
    resolved = config.resolve(["model", "draft", "spec"], flags,
                              profile="p" if where == "profile" else None)
    load = LoadSettings.from_settings(resolved)
    assert load.draft == NO_DRAFT and load.no_draft and wants_draft(load) is None


def test_an_unset_draft_is_the_presets_own(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECCHAT_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.delenv("SPECCHAT_DRAFT", raising=False)
    load = LoadSettings.from_settings(config.resolve(["model", "draft", "spec"], {}))
    assert load.draft is None and wants_draft(load) == "qwen2.5-coder-0.5b"
    assert wants_draft(LoadSettings(spec=Spec.OFF)) is None  # off never loads a draft


@pytest.mark.parametrize(("name", "text", "message"), [
    ("temperature", "hot", "needs a number"), ("top_p", "3", "top_p must be in (0, 1]"),
    ("spec", "fast", "must be one of auto, draft, ngram, off"), ("ctx", "8", "0 or >= 16"),
    ("seed", "-2", "seed must be >= 0, or -1 for a random seed"),
    ("plain", "maybe", "true or false"), ("port", "70000", "65535"),
    ("prompt_cache", "1X", "needs a size like 2G"),
])
def test_bad_text_values_say_what_is_allowed(name: str, text: str, message: str) -> None:
    with pytest.raises(OptionError, match=message.replace("(", r"\(").replace(")", r"\)")):
        BY_NAME[name].from_text(text)


def test_typed_values_from_toml_are_checked() -> None:
    assert BY_NAME["temperature"].validate(1) == 1.0
    with pytest.raises(OptionError):
        BY_NAME["top_k"].validate(True)  # a bool is not an integer here
    with pytest.raises(OptionError):
        BY_NAME["max_tokens"].validate("12x")


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_precedence_flag_env_profile_file_default(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = write(tmp_path / "c.toml", 'temperature = 0.1\ntop_k = 5\nmin_p = 0.05\n'
                '[profile.p]\ntemperature = 0.2\ntop_k = 6\n')
    monkeypatch.setenv("SPECCHAT_CONFIG", str(cfg))
    names = ("temperature", "top_k", "min_p", "top_p", "max_tokens")
    got = config.resolve(names, {"temperature": 0.9}, profile="p",
                         environ={"SPECCHAT_TOP_K": "7", "SPECCHAT_MAX_TOKENS": "9"})
    assert got.values == {"temperature": 0.9, "top_k": 7, "min_p": 0.05, "top_p": 1.0,
                          "max_tokens": 9}
    assert got.sources == {"temperature": "flag", "top_k": "env", "min_p": "file",
                           "top_p": "default", "max_tokens": "env"}
    got = config.resolve(names, {}, profile="p", environ={})
    assert got.values["temperature"] == 0.2 and got.sources["temperature"] == "profile p"


def test_flag_only_options_ignore_env_and_file(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECCHAT_CONFIG", str(write(tmp_path / "c.toml", "temperature = 1\n")))
    got = config.resolve(("temperature",), {}, environ={"SPECCHAT_TEMPERATURE": "0.5"},
                         defaults={"temperature": 0.0}, flag_only=("temperature",))
    assert got.values["temperature"] == 0.0 and got.sources["temperature"] == "default"


@pytest.mark.parametrize(("text", "message"), [
    ("temprature = 1\n", "unknown key 'temprature'"),
    ("top_k = -1\n", "top_k: top_k must be >= 0"),
    ("[profile.x]\nspec = 'fast'\n", r"\[profile.x\] spec: spec must be one of"),
    ("model = \n", "not valid TOML"),
])
def test_bad_config_file_is_one_line_naming_file_and_key(tmp_path: Path, text: str,
                                                         message: str) -> None:
    path = write(tmp_path / "bad.toml", text)
    with pytest.raises(UsageError, match=message) as info:
        config.read_config(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_unknown_profile_lists_the_known_ones(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = write(tmp_path / "c.toml", "[profile.code]\ntop_k = 1\n")
    monkeypatch.setenv("SPECCHAT_CONFIG", str(cfg))
    with pytest.raises(UsageError, match="no profile 'prose'.*profiles: code"):
        config.resolve(("top_k",), {}, profile="prose", environ={})



def _save_many(path: str, option: str, n: int) -> None:
    for i in range(1, n + 1):
        config.save_settings({option: i}, Path(path))


def test_settings_saved_at_once_by_several_processes_are_all_kept(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    names = ("seed", "top_k", "max_tokens", "repeat_last_n")
    assert run_together(_save_many, [(str(path), name, 80) for name in names]) == [0] * 4
    assert config.read_config(path).base == dict.fromkeys(names, 80)

def test_save_settings_keeps_comments_and_profiles(tmp_path: Path) -> None:
    path = write(tmp_path / "c.toml", "# mine\ntop_k = 5  # keep\n\n[profile.code]\ntop_k = 1\n")
    config.save_settings({"temperature": 0.3, "top_k": 9, "seed": None}, path)
    text = path.read_text()
    assert "# mine" in text and "[profile.code]" in text
    parsed = config.read_config(path)
    assert parsed.base == {"temperature": 0.3, "top_k": 9}
    assert parsed.profiles == {"code": {"top_k": 1}}
    assert path.stat().st_mode & 0o777 == 0o600
