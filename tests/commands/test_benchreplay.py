"""`specchat bench --cost-profile` and `--record` as users run them: tables, JSON, one-line
errors with exit code 2; and, on the real models, that a recording replays what the engine
really does."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from specchat.bench import recording as rec
from specchat.bench.replay import replay_mode
from specchat.engine.build import generate
from specchat.engine.events import Finished
from specchat.engine.options import GenerationOptions, Spec
from tests.support.clirun import run_cli
from tests.support.recordings import DATA, profile_json


def test_a_replay_prints_one_table_per_profile(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["bench", "--cost-profile", "rtx3090-8b-q4_0", "--categories",
                              "qa", "--limit", "1", "--modes", "auto"], capsys)
    assert code == 0, err
    assert "rtx3090-8b-q4_0: simulated speedup over off" in out
    rows = [line.split() for line in out.splitlines() if line.startswith(("qa ", "overall"))]
    assert [r[0] for r in rows] == ["qa", "overall"]
    assert "draft" not in out.split("\n")[1].split()[:4]  # --modes auto: no draft column
    assert all(len(line) <= 80 for line in out.splitlines())  # fits a terminal


def test_the_json_of_a_replay_goes_to_stdout_or_a_file(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    recording = tmp_path / "rec.json"
    rec.save(DATA, recording)
    profile = tmp_path / "gpu.json"
    profile.write_text(json.dumps(profile_json([1.0 + 0.05 * i for i in range(17)], 0.1, 0.0)))
    args = ["bench", "--cost-profile", str(profile), "--recording", str(recording)]
    code, out, err = run_cli([*args, "--json", "-"], capsys)
    assert code == 0, err
    document = json.loads(out)
    assert document["profile"] == "synthetic" and set(document["table"]) == {
        "code", "prose", "overall"}
    assert "simulated speedup" in err  # the table moved to stderr
    code, out, err = run_cli([*args, "--json", str(tmp_path / "out.json")], capsys)
    assert code == 0 and json.loads((tmp_path / "out.json").read_text()) == document


@pytest.mark.parametrize(("args", "message"), [
    (["--cost-profile", "no-such-profile"], "no such cost profile file or built-in profile"),
    (["--cost-profile", "rtx3090-8b-q4_0", "--recording", "missing.json"],
     "no such recording"),
    (["--recording", "builtin"], "add --cost-profile FILE"),
    (["prompts.jsonl", "--cost-profile", "rtx3090-8b-q4_0"], "leave out the prompts file"),
    (["--cost-profile", "rtx3090-8b-q4_0", "--categories", "poetry"], "unknown category"),
    (["--cost-profile", "rtx3090-8b-q4_0", "--modes", "fast"], "unknown mode"),
])
def test_bad_replay_input_is_one_line_and_exit_2(args: list[str], message: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["bench", *args], capsys)
    assert code == 2 and out == ""
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_record_refuses_what_it_cannot_record(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["bench", "--record", "-"], capsys)
    assert code == 2 and "needs a file name" in err
    code, _, err = run_cli(["bench", "--record", "x.json", "-t", "0.7"], capsys)
    assert code == 2 and "greedy" in err
    code, _, err = run_cli(["bench", "--record", "x.json", "--calibrate"], capsys)
    assert code == 2 and "choose one" in err


@pytest.mark.real
@pytest.mark.slow
def test_a_recording_replays_what_the_engine_really_does(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        real_model_path: Callable[[str], Path]) -> None:
    """Record one prompt with the real 1.5B/0.5B pair, then run the engine's `draft` and
    `ngram` modes for real: the replay drafts and accepts the very same tokens."""
    target, draft = real_model_path("qwen2.5-coder-1.5b"), real_model_path("qwen2.5-coder-0.5b")
    out = tmp_path / "rec.json"
    code, _, err = run_cli(["bench", "--record", str(out), "--categories", "code-edit",
                            "--limit", "1", "-n", "32", "-m", str(target), "--draft",
                            str(draft)], capsys)
    assert code == 0, err
    recording = rec.load(out)
    item = recording.items[0]
    assert len(item.answer) == 32 and item.draft is not None and item.draft_p is not None
    from specchat.llm.model import load_model
    from tests.support.recordings import gpu_profile

    with load_model(target, n_ctx=2048) as t, load_model(draft, n_ctx=2048) as d:
        for spec in (Spec.DRAFT, Spec.NGRAM):
            t.truncate(0)
            d.truncate(0)
            options = GenerationOptions(max_tokens=32, spec=spec)
            *_, fin = generate(t, list(item.prompt), options, draft=d)
            assert isinstance(fin, Finished) and fin.tokens == item.answer
            replayed = replay_mode(item, recording, gpu_profile(), spec)
            assert (replayed.steps, replayed.drafted, replayed.accepted) == (
                fin.stats.steps, fin.stats.drafted, fin.stats.accepted), spec


def test_a_recording_whose_max_tokens_disagrees_is_one_line_and_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from importlib import resources

    shipped = resources.files("specchat.bench").joinpath("recordings", "builtin.json")
    data = json.loads(shipped.read_text(encoding="utf-8"))
    data["max_tokens"] += 50  # its answers cut at the old limit could not end there now
    path = tmp_path / "longer.json"
    path.write_text(json.dumps(data))
    code, out, err = run_cli(["bench", "--recording", str(path), "--cost-profile",
                              "cpu-2core-qwen1.5b"], capsys)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "max_tokens" in err and "disagrees" in err and "RuntimeError" not in err
