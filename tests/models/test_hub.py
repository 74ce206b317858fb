"""Hugging Face references against a local fake hub (tests/support/fakehub.py), never the real
hub."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from specchat.errors import DownloadError, UsageError
from specchat.models.hfcache import repo_dir
from specchat.models.resolve import resolve_model
from tests.support.clirun import run_cli_process
from tests.support.fakehub import COMMIT, PART1, PART2, Q4, Q8, REPO, FakeHub, serve


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again when the with block ends


def test_default_quant_is_q4_k_m_and_lands_in_the_hf_cache(hub_env: FakeHub) -> None:
    path = resolve_model(REPO, quiet=True)
    assert path.read_bytes() == Q4
    assert path == repo_dir(REPO) / "snapshots" / COMMIT / "tiny-Q4_K_M.gguf"
    assert (repo_dir(REPO) / "refs" / "main").read_text() == COMMIT
    assert (repo_dir(REPO) / "blobs" / hashlib.sha256(Q4).hexdigest()).is_file()
    assert [r[1] for r in hub_env.file_requests()] == [f"/{REPO}/resolve/{COMMIT}/tiny-Q4_K_M.gguf"]


def test_quant_is_case_insensitive_and_prefixes_work(hub_env: FakeHub) -> None:
    assert resolve_model(f"hf.co/{REPO}:q8_0", quiet=True).read_bytes() == Q8
    assert resolve_model(f"https://huggingface.co/{REPO}:Q8_0", quiet=True).read_bytes() == Q8


def test_split_file_downloads_every_part_and_loads_from_the_first(hub_env: FakeHub) -> None:
    path = resolve_model(f"{REPO}:Q2_K", quiet=True)
    assert path.name == "big-Q2_K-00001-of-00002.gguf"
    assert path.read_bytes() == PART1
    assert (path.parent / "big-Q2_K-00002-of-00002.gguf").read_bytes() == PART2


def test_missing_quant_lists_what_the_repo_has(hub_env: FakeHub) -> None:
    with pytest.raises(UsageError) as info:
        resolve_model(f"{REPO}:Q5_K_M", quiet=True)
    assert str(info.value) == (f"{REPO} has no Q5_K_M file in the repo; it has Q2_K, Q4_K_M, "
                               f"Q8_0 (write {REPO}:QUANT)")
    assert hub_env.file_requests() == []  # nothing downloaded for a wrong name


def test_unknown_repo_is_a_usage_error(hub_env: FakeHub) -> None:
    with pytest.raises(UsageError, match="no repository me/nothing-GGUF on the hub"):
        resolve_model("me/nothing-GGUF", quiet=True)


def test_cached_ref_starts_with_no_request_even_with_the_hub_up(hub_env: FakeHub,
                                                                 monkeypatch: pytest.MonkeyPatch
                                                                 ) -> None:
    first = resolve_model(f"{REPO}:Q8_0", quiet=True)
    hub_env.requests.clear()
    assert resolve_model(f"{REPO}:Q8_0", quiet=True) == first
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert resolve_model(f"{REPO}:q8_0", quiet=True) == first
    assert hub_env.requests == []


def test_recorded_resolution_wins_over_later_cache_contents(hub_env: FakeHub) -> None:
    """`-m REPO` resolved to Q4_K_M once; a Q2_K pulled later must not change what it means."""
    q4 = resolve_model(REPO, quiet=True)
    resolve_model(f"{REPO}:Q2_K", quiet=True)
    hub_env.requests.clear()
    assert resolve_model(REPO, quiet=True) == q4
    assert hub_env.requests == []


def test_uncached_ref_with_hub_offline_fails_without_a_request(hub_env: FakeHub,
                                                                monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DownloadError, match="HF_HUB_OFFLINE is set") as info:
        resolve_model(REPO, quiet=True)
    assert info.value.exit_code == 1
    assert hub_env.requests == []


def test_partial_blob_from_a_killed_download_is_resumed(hub_env: FakeHub) -> None:
    blob = repo_dir(REPO) / "blobs" / hashlib.sha256(Q8).hexdigest()
    blob.parent.mkdir(parents=True)
    blob.with_name(blob.name + ".incomplete").write_bytes(Q8[:1000])
    path = resolve_model(f"{REPO}:Q8_0", quiet=True)
    assert path.read_bytes() == Q8
    gets = hub_env.file_requests()
    assert len(gets) == 1 and gets[0][2].get("Range") == "bytes=1000-"
    assert not blob.with_name(blob.name + ".incomplete").exists()


def test_dropped_connection_resumes_where_it_stopped(hub_env: FakeHub,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    # huggingface_hub keeps what it received in whole chunks (10 MB); small ones here.
    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 256)
    hub_env.cut_after = 512
    try:  # newer huggingface_hub retries within the call; older ones stop, keeping the part
        path = resolve_model(f"{REPO}:Q8_0", quiet=True)
    except DownloadError as exc:
        assert str(exc).endswith("run the same command again to resume")
        path = resolve_model(f"{REPO}:Q8_0", quiet=True)
    assert path.read_bytes() == Q8
    ranges = [r[2].get("Range") for r in hub_env.file_requests()]
    assert ranges == [None, "bytes=512-"]


def test_cli_pull_lists_and_then_starts_offline(hub_env: FakeHub) -> None:
    done = run_cli_process(["pull", f"{REPO}:Q2_K"])
    assert done.returncode == 0, done.stderr
    first = Path(done.stdout.strip())
    assert first.name == "big-Q2_K-00001-of-00002.gguf"
    listed = run_cli_process(["models"])
    assert listed.returncode == 0, listed.stderr
    assert f"{REPO}  1.6 kB  split/big-Q2_K-00001-of-00002.gguf" in listed.stdout
    hub_env.requests.clear()
    again = run_cli_process(["pull", f"hf.co/{REPO}:Q2_K"])
    assert again.returncode == 0 and Path(again.stdout.strip()) == first
    assert hub_env.requests == []


def test_cli_missing_quant_is_one_line_exit_2(hub_env: FakeHub) -> None:
    done = run_cli_process(["pull", f"{REPO}:IQ1_S"])
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        (f"specchat: error: {REPO} has no IQ1_S file in the repo; it has Q2_K, Q4_K_M, Q8_0 "
         f"(write {REPO}:QUANT)")]


def test_cli_without_network_fails_with_one_line(hub_env: FakeHub,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    done = run_cli_process(["pull", REPO], timeout=60)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"specchat: error: {REPO} is not in the "
                                                   f"Hugging Face cache")
    assert "unreachable" in lines[0] and f"specchat pull {REPO}" in lines[0]


@pytest.mark.real
@pytest.mark.slow
def test_real_model_from_the_fake_hub_answers_offline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, real_model_path: object) -> None:
    smol = real_model_path("smollm2-135m")  # type: ignore[operator]
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    repo = {"me/smol-GGUF": {"SmolLM2-135M-Instruct.Q4_1.gguf": Path(smol).read_bytes()}}
    args = ["ask", "-m", "me/smol-GGUF:q4_1", "--spec", "off", "-n", "4", "-t", "0", "Hi"]
    with serve(FakeHub(repo)) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        online = run_cli_process(args, timeout=300)
    assert online.returncode == 0, online.stderr
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    offline = run_cli_process(args, timeout=300)
    assert offline.returncode == 0, offline.stderr
    assert offline.stdout == online.stdout and offline.stdout.strip()


def test_hf_preset_lives_in_the_hf_cache(hub_env: FakeHub, tmp_path: Path) -> None:
    from specchat.models import find_preset, preset_present

    (tmp_path / "home").mkdir(exist_ok=True)
    (tmp_path / "home" / "models.toml").write_text(
        '[[model]]\nname = "tiny"\nhf = "me/tiny-GGUF:Q2_K"\n'
        'file = "big-Q2_K-00001-of-00002.gguf"\nsize = 1604\n')
    assert not preset_present(find_preset("tiny"))
    path = resolve_model("tiny", quiet=True)
    assert path.read_bytes() == PART1 and preset_present(find_preset("tiny"))
    hub_env.requests.clear()
    assert resolve_model("tiny", quiet=True) == path
    assert hub_env.requests == []


def test_hf_preset_cannot_also_have_sources(hub_env: FakeHub, tmp_path: Path) -> None:
    from specchat.models import load_presets

    (tmp_path / "home").mkdir(exist_ok=True)
    (tmp_path / "home" / "models.toml").write_text(
        '[[model]]\nname = "x"\nhf = "me/tiny-GGUF"\nfile = "x.gguf"\nsize = 1\n'
        '[[model.source]]\nkind = "hub"\nrepo = "a/b"\nfile = "x.gguf"\n')
    with pytest.raises(UsageError, match="'hf' must be owner/name"):
        load_presets()


@pytest.mark.real
def test_drafts_for_judges_presets_and_hf_cache_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, real_model_path: object) -> None:
    smol = Path(real_model_path("smollm2-135m"))  # type: ignore[operator]
    real_model_path("qwen2.5-coder-0.5b")  # type: ignore[operator]
    target = Path(real_model_path("qwen2.5-coder-1.5b"))  # type: ignore[operator]
    monkeypatch.setenv("SPECCHAT_CACHE", str(target.parent))  # the real presets, read only
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path / "home"))
    with serve(FakeHub({"me/smol-GGUF": {smol.name: smol.read_bytes()}})) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        resolve_model("me/smol-GGUF", quiet=True)
    done = run_cli_process(["models", "--drafts-for", "qwen2.5-coder-1.5b"])
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line.split(None, 3)[1:] for line in done.stdout.splitlines()[1:]}
    assert rows["qwen2.5-coder-0.5b"][0] == "yes"
    assert rows["qwen2.5-0.5b"][0] == "?"  # same family, not downloaded
    assert rows["qwen2.5-7b"][0] == "no" and "not smaller than the target" in \
        rows["qwen2.5-7b"][2]
    hf_row = rows[f"me/smol-GGUF:{smol.name}"]
    assert hf_row[0] == "no" and "vocabulary size 151936 vs 49152" in hf_row[2]


NO_HTTPX = ("import sys; sys.modules['httpx'] = None; from specchat.cli import main; "
            "main(sys.argv[1:])")


def test_a_download_needs_only_what_huggingface_hub_brings(hub_env: FakeHub) -> None:
    """A fresh install has the HTTP client huggingface_hub depends on (httpx2 under 2.x),
    not httpx, which only the test extras install."""
    import huggingface_hub

    if int(huggingface_hub.__version__.split(".")[0]) < 2:
        pytest.skip("huggingface_hub 1.x brings httpx itself")
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", NO_HTTPX, "pull", f"{REPO}:Q8_0"],
                          env={**os.environ, "PYTHONPATH": str(root)}, capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert resolve_model(f"{REPO}:Q8_0", pull=False, quiet=True).read_bytes() == Q8
