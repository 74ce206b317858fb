"""Padded vocabularies on real GGUF files: compatible up to 128 ids, greedy and sampled exact.

The padded models are copies of SmolLM2-135M with unused ids appended (tests/support/gguf_pad.py),
written once per session under pytest's temporary directory. A Q2_K requantization of each
is the draft that disagrees (test_engine_real.py uses the same pairing unpadded), so both
directions see real rejections:

- target larger: SmolLM2 + 64 padding ids as target, SmolLM2 Q2_K as draft;
- draft larger: SmolLM2 as target, (SmolLM2 + 64 padding ids) Q2_K as draft.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from scipy.special import softmax

from specchat.engine.options import GenerationOptions, SamplingOptions
from specchat.errors import ModelError, UsageError
from specchat.llm import (
    check_compatible,
    compatibility_problems,
    load_model,
    read_vocab_info,
)
from specchat.llm.files import requantize
from specchat.llm.model import LlamaModel
from tests.support.gguf_pad import write_padded_copy
from tests.support.realengine import (
    PROMPTS,
    answer,
    check_greedy_equivalence,
    chi_square_p,
    next_logits,
    prompt_of,
)

pytestmark = pytest.mark.real

N_DRAWS = 2000
SMOL_VOCAB = 49152
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def padded(real_model_path: Callable[[str], Path],
           tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The model files of both directions (and one padded past the bound), written once."""
    pytest.importorskip("gguf", reason="the gguf package (test extra) writes the padded copies")
    smol = real_model_path("smollm2-135m")
    folder = tmp_path_factory.mktemp("padded")
    pad64 = write_padded_copy(smol, folder / "smol-pad64.gguf", 64)
    return {
        "smol": smol,
        "pad64": pad64,
        "pad129": write_padded_copy(smol, folder / "smol-pad129.gguf", 129),
        "q2": requantize(smol, folder / "smol-q2_k.gguf", "Q2_K"),
        "pad64-q2": requantize(pad64, folder / "smol-pad64-q2_k.gguf", "Q2_K"),
    }


DIRECTIONS = {"target-larger": ("pad64", "q2"), "draft-larger": ("smol", "pad64-q2")}


@pytest.fixture(scope="module", params=list(DIRECTIONS))
def pair(request: pytest.FixtureRequest,
         padded: dict[str, Path]) -> Iterator[tuple[LlamaModel, LlamaModel]]:
    target_name, draft_name = DIRECTIONS[request.param]
    # One thread each: on a shared small machine, llama.cpp's threads spin waiting for each
    # other and a two-token step gets ~20x slower.
    with load_model(padded[target_name], n_ctx=1024, n_threads=1) as target, \
            load_model(padded[draft_name], n_ctx=1024, n_threads=1) as draft:
        yield target, draft


def test_the_vocab_only_read_is_what_the_loaded_model_reports(padded: dict[str, Path]) -> None:
    with load_model(padded["pad64"], n_ctx=64, n_threads=1) as model:
        loaded = model.vocab_info()
    read = read_vocab_info(padded["pad64"])
    assert read.n_tokens == loaded.n_tokens == SMOL_VOCAB + 64
    assert read.texts == loaded.texts and read.texts[-1] == f"[PAD{SMOL_VOCAB + 63}]".encode()
    assert np.array_equal(read.types, loaded.types)
    assert (read.pre, read.vocab_type, read.specials, read.eog) == (
        loaded.pre, loaded.vocab_type, loaded.specials, loaded.eog)
    assert read.pre == "smollm"


def test_the_padded_copy_computes_the_same_logits_plus_zero_rows(
        padded: dict[str, Path]) -> None:
    """The writer changes nothing but the padding: shared logits are bit-identical, and the
    zero embedding rows (SmolLM2 ties its output to them) give the new ids logit 0."""
    with load_model(padded["smol"], n_ctx=128, n_threads=1) as smol, \
            load_model(padded["pad64"], n_ctx=128, n_threads=1) as pad:
        tokens = smol.tokenize("The lighthouse keeper looked at the sea and")
        plain, wide = smol.eval(tokens, [-1])[0], pad.eval(tokens, [-1])[0]
    assert wide.shape == (SMOL_VOCAB + 64,)
    assert np.array_equal(wide[:SMOL_VOCAB], plain) and not wide[SMOL_VOCAB:].any()


def test_a_non_gguf_file_is_a_model_error(tmp_path: Path) -> None:
    (tmp_path / "x.gguf").write_bytes(b"not a model")
    with pytest.raises(ModelError, match="not a GGUF model file"):
        read_vocab_info(tmp_path / "x.gguf")


def test_padding_up_to_128_is_compatible_and_past_it_refused(padded: dict[str, Path]) -> None:
    smol, pad64 = read_vocab_info(padded["smol"]), read_vocab_info(padded["pad64"])
    assert compatibility_problems(pad64, smol) == []
    assert compatibility_problems(smol, read_vocab_info(padded["pad64-q2"])) == []
    with pytest.raises(UsageError) as caught:
        check_compatible(read_vocab_info(padded["pad129"]), smol)
    assert str(caught.value) == (
        "draft SmolLM2-135M-Instruct.Q4_1.gguf cannot draft for target smol-pad129.gguf: "
        f"vocabulary size {SMOL_VOCAB + 129} vs {SMOL_VOCAB} (sizes may differ by at most "
        "128 padding tokens) (target vs draft)")


@pytest.mark.slow
def test_greedy_speculation_equals_plain_decoding(pair: tuple[LlamaModel, LlamaModel]) -> None:
    target, draft = pair
    differ = check_greedy_equivalence(target, draft, ["draft"], 32)
    assert sum(differ.values()) <= len(PROMPTS) // 4  # only at float near-ties, rarely


@pytest.mark.slow
def test_the_first_token_has_the_targets_softmax(pair: tuple[LlamaModel, LlamaModel]) -> None:
    """Temperature 1, no truncation: whole rows, so the padding ids are in play (the padded
    model gives them logit 0, a tiny but nonzero probability)."""
    target, draft = pair
    prompt = prompt_of(target, "Tell me a story about a dragon.")
    p = softmax(next_logits(target, prompt).astype(np.float64))  # sums to 1 in float64
    assert len(p) == target.n_vocab
    counts: Counter[tuple[int, ...]] = Counter()
    drafted = accepted = 0
    for seed in range(N_DRAWS):
        options = GenerationOptions(sampling=SamplingOptions(temperature=1.0, seed=seed),
                                    max_tokens=2, spec="draft", draft_max=2)
        done = answer(target, prompt, options, draft)
        counts[done.tokens[:1]] += 1
        drafted += done.stats.drafted
        accepted += done.stats.accepted
    exact = {(int(t),): float(p[t]) for t in np.flatnonzero(p > 0)}
    p_value = chi_square_p(counts, exact)
    print(f"{target.path.name} <- {draft.path.name}: acceptance {accepted}/{drafted}, "
          f"chi-square p={p_value:.3g}")
    assert 0 < accepted < drafted
    assert p_value > 1e-4


def test_the_cli_drafts_for_a_padded_target_with_the_same_greedy_answer(
        padded: dict[str, Path], tmp_path: Path) -> None:
    # --exact: token-for-token equality with off is its promise. The default's verify rows may
    # flip a near-tie (docs/exactness.md), as they do on this prompt with flash attention off.
    env_cache = {"SPECCHAT_CACHE": str(padded["smol"].parent)}  # where -d smollm2-135m is
    runs = {}
    for spec in ("off", "draft"):
        done = _cli(padded["pad64"], spec, tmp_path, env_cache)
        assert done.returncode == 0, done.stderr
        runs[spec] = json.loads(done.stdout)
    assert runs["draft"]["tokens"] == runs["off"]["tokens"]
    assert runs["draft"]["text"] == runs["off"]["text"]
    stats = runs["draft"]["stats"]
    print(f"CLI greedy, padded target: acceptance {stats['accepted']}/{stats['drafted']}")
    assert stats["drafted"] > 0
    # Past the padding bound the vocabularies differ: a draft named with -d then drafts
    # text, re-tokenized for the target (engine/textdraft.py), with the same greedy answer.
    far = {spec: _cli(padded["pad129"], spec, tmp_path, env_cache) for spec in ("off", "draft")}
    assert all(done.returncode == 0 for done in far.values()), far["draft"].stderr
    far_runs = {spec: json.loads(done.stdout) for spec, done in far.items()}
    assert far_runs["draft"]["tokens"] == far_runs["off"]["tokens"]
    assert far_runs["draft"]["stats"]["accepted"] > 0


def _cli(model: Path, spec: str, home: Path,
         env_extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SPECCHAT_HOME": str(home), "XDG_STATE_HOME": str(home / "state"),
           "XDG_CONFIG_HOME": str(home / "config"), **env_extra}
    return subprocess.run(
        [sys.executable, "-m", "specchat", "ask", "-m", str(model), "-d", "smollm2-135m",
         "--spec", spec, "-t", "0", "-n", "24", "--json", "--threads", "1", "--exact",
         "Write a haiku about the sea."],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=300, check=False)
