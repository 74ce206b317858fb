"""What a hostile or broken hub can send, through the real CLI and a local fake hub
(tests/support/fakehub.py, HF_ENDPOINT): an ETag that is a path, a redirect to another host, a login
page instead of the file, bytes that do not match the listing; and `owner/name:FILE.gguf`."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from specchat.errors import DownloadError
from specchat.models.hfcache import repo_dir
from specchat.models.resolve import resolve_model
from tests.support.clirun import run_cli_process
from tests.support.fakehub import Q8, REPO, FakeHub, serve


def _one_error_line(done: object) -> str:
    """The one error line (after any progress notes), with no traceback anywhere."""
    stderr = done.stderr  # type: ignore[attr-defined]
    errors = [line for line in stderr.splitlines() if line.startswith("specchat: error: ")]
    assert len(errors) == 1 and stderr.strip().endswith(errors[0]), stderr
    assert "Traceback" not in stderr
    return str(errors[0])


def _leftovers(root: Path) -> list[str]:
    """Partial or complete blobs of the repo in the cache."""
    blobs = repo_dir(REPO) / "blobs"
    return sorted(p.name for p in blobs.iterdir()) if blobs.is_dir() else []


def test_an_etag_that_is_a_path_writes_nothing_outside_the_cache(hub_env: FakeHub,
                                                                  tmp_path: Path) -> None:
    # blobs/ is HF_HOME/hub/models--me--tiny-GGUF/blobs: four levels up is tmp_path.
    hub_env.etag = '"../../../../escaped"'
    done = run_cli_process(["pull", f"{REPO}:Q8_0"])
    assert done.returncode == 1
    line = _one_error_line(done)
    assert "not a content hash" in line and "../../../../escaped" in line
    assert not (tmp_path / "escaped").exists()
    assert not (tmp_path / "escaped.lock").exists()
    assert not (tmp_path / "escaped.incomplete").exists()
    assert hub_env.file_requests("GET") == []  # refused before a byte was asked for


def test_the_token_goes_to_the_hub_never_to_the_host_a_redirect_names(
        hub_env: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_secret_token")
    with serve(FakeHub(hub_env.repos), name="localhost") as cdn:
        hub_env.cdn = cdn.url  # file requests answer 302 to another host, as a CDN
        done = run_cli_process(["pull", f"{REPO}:Q8_0"])
        assert done.returncode == 0, done.stderr
        assert Path(done.stdout.strip()).read_bytes() == Q8
        assert cdn.file_requests("GET"), "the file was not fetched from the CDN"
        for method, path, headers in cdn.requests:
            sent = {k.lower() for k in headers}
            assert "authorization" not in sent, f"{method} {path} carried the token"
    # The listing and the file's HEAD went to the hub itself, with the token.
    to_hub = [h for _, path, h in hub_env.requests if "/resolve/" in path or "/revision/" in path]
    assert len(to_hub) == 2 and all({k.lower(): v for k, v in h.items()}.get("authorization")
                                    == "Bearer hf_secret_token" for h in to_hub)


def test_a_login_page_is_refused_and_never_resumed_into_the_model(hub_env: FakeHub) -> None:
    hub_env.html_pages = 1
    first = run_cli_process(["pull", f"{REPO}:Q8_0"])
    assert first.returncode == 1
    incomplete = repo_dir(REPO) / "blobs" / f"{hashlib.sha256(Q8).hexdigest()}.incomplete"
    kept = incomplete.read_bytes() if incomplete.exists() else b""
    again = run_cli_process(["pull", f"{REPO}:Q8_0"])
    assert again.returncode == 0, again.stderr
    assert Path(again.stdout.strip()).read_bytes() == Q8
    assert kept == b"" and "web page" in _one_error_line(first)


def test_a_kept_page_from_an_older_version_is_not_resumed(hub_env: FakeHub) -> None:
    blob = repo_dir(REPO) / "blobs" / hashlib.sha256(Q8).hexdigest()
    blob.parent.mkdir(parents=True)
    blob.with_name(blob.name + ".incomplete").write_bytes(b"<html>Please log in</html>")
    path = resolve_model(f"{REPO}:Q8_0", quiet=True)
    assert path.read_bytes() == Q8
    assert [r[2].get("Range") for r in hub_env.file_requests()] == [None]


def test_bytes_that_do_not_match_the_listed_sha256_are_removed(hub_env: FakeHub) -> None:
    hub_env.repos[REPO]["tiny-Q8_0.gguf"] = Q8[:-1] + b"!"  # same size, other bytes ...
    hub_env.with_lfs = False  # ... and the ETag (a sha256) is all there is to check it by
    hub_env.etag = f'"{hashlib.sha256(Q8).hexdigest()}"'
    with pytest.raises(DownloadError, match="sha256 .* is not the .* the hub lists"):
        resolve_model(f"{REPO}:Q8_0", quiet=True)
    assert _leftovers(repo_dir(REPO)) == []


def test_the_listed_sha256_is_checked_even_when_the_etag_agrees(hub_env: FakeHub) -> None:
    hub_env.listed_sha256 = {"tiny-Q8_0.gguf": hashlib.sha256(b"another file").hexdigest()}
    with pytest.raises(DownloadError, match="is not the .* the hub lists"):
        resolve_model(f"{REPO}:Q8_0", quiet=True)
    assert _leftovers(repo_dir(REPO)) == []


def test_owner_name_colon_file_gguf_is_a_hub_file(hub_env: FakeHub) -> None:
    done = run_cli_process(["pull", f"{REPO}:tiny-Q8_0.gguf"])
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).read_bytes() == Q8
    assert resolve_model(f"{REPO}:TINY-q8_0.GGUF", quiet=True).read_bytes() == Q8


def test_offline_a_missing_quant_names_what_the_cache_holds(
        hub_env: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    assert run_cli_process(["pull", f"{REPO}:Q8_0"]).returncode == 0
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    done = run_cli_process(["pull", f"{REPO}:Q5_K_M"])
    assert done.returncode == 1
    line = _one_error_line(done)
    assert f"{REPO}:Q5_K_M is not in the Hugging Face cache" in line
    assert f"it holds {REPO}:Q8_0" in line


def test_pull_force_of_a_preset_never_resumes_a_login_page(hub_env: FakeHub,
                                                           tmp_path: Path) -> None:
    """A preset whose one source is the hub (specchat's own cache, `pull --force`)."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / "models.toml").write_text(
        f'[[model]]\nname = "tiny"\nfile = "tiny.gguf"\nsize = {len(Q8)}\nrole = "test"\n\n'
        f'[[model.source]]\nkind = "hub"\nrepo = "{REPO}"\nfile = "tiny-Q8_0.gguf"\n')
    hub_env.html_pages = 1
    first = run_cli_process(["pull", "tiny", "--force"])
    assert first.returncode == 1
    again = run_cli_process(["pull", "tiny", "--force"])
    assert again.returncode == 0, again.stderr
    assert Path(again.stdout.strip()).read_bytes() == Q8
    assert "web page" in _one_error_line(first)
    assert sorted(p.name for p in (home / "models").iterdir() if p.name != ".locks") == [
        "tiny.gguf", "tiny.gguf.sha256"]
