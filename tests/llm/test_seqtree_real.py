"""Trees of candidates in one llama_decode (llm/seqtree.py) on real GGUF models: every row
is what evaluating its path alone gives, the kept branch continues exactly like a chain,
and the cache is consistent after keeping, rejecting, truncating or failing."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from specchat.engine.build import Hooks, generate
from specchat.engine.events import Finished
from specchat.engine.options import GenerationOptions
from specchat.engine.protocol import TreeModel
from specchat.engine.suffix import Segment, SuffixIndex
from specchat.llm.model import LlamaModel, load_model
from specchat.llm.seqtree import TREE_SEQUENCES

pytestmark = pytest.mark.real

# Root, two children; the first has two children, the second one: four leaves.
TREE_PARENTS = [-1, 0, 0, 1, 1, 2]
PATHS = {0: [], 1: [1], 2: [2], 3: [1, 3], 4: [1, 4], 5: [2, 5]}


@pytest.fixture(scope="module", params=["smollm2-135m", "gemma3-270m"])
def model(request: pytest.FixtureRequest,
          real_model_path: Callable[[str], Path]) -> Iterator[LlamaModel]:
    with load_model(real_model_path(request.param), n_ctx=256, n_threads=2,
                    tree_sequences=TREE_SEQUENCES) as m:
        yield m


@pytest.fixture(scope="module")
def reference(model: LlamaModel) -> Iterator[LlamaModel]:
    with load_model(model.path, n_ctx=256, n_threads=2, tree_sequences=TREE_SEQUENCES) as m:
        yield m


def consistent(m: LlamaModel) -> bool:
    return m.cached_positions() == len(m.tokens)


def prompt_and_tree(m: LlamaModel) -> tuple[list[int], list[int]]:
    prompt = m.tokenize("The quick brown fox jumps over the lazy dog. " * 2)
    return prompt, [prompt[-1], *m.tokenize(" a b c d e")[:5]]


def batch_noise(m: LlamaModel, prompt: list[int], tree: list[int]) -> float:
    """How far a row moves when the same tokens go in one batch of the tree's size instead
    of one at a time, over every row of it: llama.cpp's kernels for K-quants differ by batch
    size and by a row's place in the batch (blocks of 4 rows through a GEMM, the rest through
    the one-row GEMV), and how much depends on the file and on the CPU's instruction set
    (0 for some; on an AVX2-only CPU Gemma 3's later rows move more than its first)."""
    chain = [prompt[-1], *tree[1:]]
    m.truncate(0)
    m.eval(prompt[:-1], [-1])
    batched = m.eval(chain, list(range(len(chain))))
    m.truncate(len(prompt) - 1)
    alone = [m.eval([token], [0])[0] for token in chain]
    m.truncate(0)
    return max(float(np.abs(b - a).max()) for b, a in zip(batched, alone, strict=True))


def test_every_tree_row_equals_its_path_evaluated_alone(model: LlamaModel,
                                                        reference: LlamaModel) -> None:
    assert isinstance(model, TreeModel) and model.max_branches >= 4
    prompt, tree = prompt_and_tree(model)
    noise = batch_noise(reference, prompt, tree)
    model.truncate(0)
    model.eval(prompt[:-1], [-1])
    rows = model.eval_tree(tree, TREE_PARENTS)
    for row, path in PATHS.items():
        reference.truncate(0)
        reference.eval(prompt[:-1], [-1])
        alone = reference.eval([prompt[-1], *(tree[i] for i in path)], [-1])[0]
        assert int(alone.argmax()) == int(rows[row].argmax())
        assert np.abs(alone - rows[row]).max() <= 2 * noise + 1e-3, (row, noise)
    model.keep_path([])
    assert list(model.tokens) == prompt and consistent(model)


@pytest.mark.parametrize("kept", [[1, 3], [1, 4], [2, 5], [2], []])
def test_a_kept_branch_continues_exactly_like_the_same_chain(
        model: LlamaModel, reference: LlamaModel, kept: list[int]) -> None:
    prompt, tree = prompt_and_tree(model)
    noise = batch_noise(reference, prompt, tree)
    model.truncate(0)
    model.eval(prompt[:-1], [-1])
    model.eval_tree(tree, TREE_PARENTS)
    model.keep_path(kept)
    branch = [tree[i] for i in kept]
    assert list(model.tokens) == [*prompt, *branch] and consistent(model)
    after = model.eval([tree[5], tree[4]], [0, 1])
    reference.truncate(0)
    reference.eval(prompt[:-1], [-1])
    reference.eval([prompt[-1], *branch], [-1])
    chain = reference.eval([tree[5], tree[4]], [0, 1])
    # Cells of a rejected sibling before the kept ones change the order attention sums in,
    # and the branch came in a batch of another size: float round-off only, so the choices
    # agree and the logits nearly.
    assert (after.argmax(axis=1) == chain.argmax(axis=1)).all()
    assert np.abs(after - chain).max() <= 2 * noise + 1.0


def test_truncating_or_evaluating_drops_a_pending_tree(model: LlamaModel) -> None:
    prompt, tree = prompt_and_tree(model)
    model.truncate(0)
    model.eval(prompt[:-1], [-1])
    model.eval_tree(tree, TREE_PARENTS)
    model.truncate(len(prompt) - 3)
    assert len(model.tokens) == len(prompt) - 3 and consistent(model)
    model.eval(prompt[-3:-1], [-1])
    model.eval_tree(tree, TREE_PARENTS)
    model.eval([tree[1]], [-1])  # a plain eval without keep_path: the tree goes first
    assert list(model.tokens) == [*prompt, tree[1]] and consistent(model)
    with pytest.raises(ValueError):
        model.eval_tree([tree[0], model.n_vocab + 5], [-1, 0])
    assert list(model.tokens) == [*prompt, tree[1]] and consistent(model)


def test_greedy_answers_with_tree_drafts_from_a_store_equal_plain_ones(
        model: LlamaModel) -> None:
    prompt = model.tokenize("List the days of the week, one per line:\n", add_special=True)
    opts = GenerationOptions(max_tokens=40, spec="off")
    model.truncate(0)
    *_, plain = generate(model, prompt, opts)
    assert isinstance(plain, Finished)
    answer = list(plain.tokens)
    wrong = [t if i % 5 else (t + 7) % model.n_vocab for i, t in enumerate(answer)]
    store = SuffixIndex([Segment.of_records([[*prompt, *answer], [*prompt, *wrong]])],
                        model.n_vocab)
    from specchat.engine.auto import AutoState
    from specchat.engine.cost import CostTable

    gpu = AutoState(target_costs=CostTable([0.01 * (1 + 0.03 * i) for i in range(17)],
                                           learn=False))
    model.truncate(0)
    *_, fin = generate(model, prompt, opts.with_values(spec="auto"),
                       hooks=Hooks(auto=gpu, store=store))
    assert isinstance(fin, Finished) and list(fin.tokens) == answer
    assert fin.stats.to_dict()["sources"]["store"]["accepted"] > 0
    assert consistent(model)


def test_a_context_on_the_cpu_holds_one_sequence_unless_asked(
        real_model_path: Callable[[str], Path]) -> None:
    """Trees never paid on a CPU, and 8 sequences in one cache slowed every plain step there:
    a CPU context gets one (auto then drafts chains), a GPU one or an explicit request more."""
    with load_model(real_model_path("smollm2-135m"), n_ctx=256, n_gpu_layers=0) as m:
        assert m.max_branches == 1
    with load_model(real_model_path("smollm2-135m"), n_ctx=256, n_gpu_layers=0,
                    tree_sequences=TREE_SEQUENCES) as m:
        assert m.max_branches == TREE_SEQUENCES


def test_a_tree_past_the_allocated_context_widens_it_and_keeps_its_rows(
        real_model_path: Callable[[str], Path]) -> None:
    path = real_model_path("smollm2-135m")
    with load_model(path, n_ctx=2048, n_threads=2, tree_sequences=TREE_SEQUENCES,
                    ctx_start=100) as small, \
            load_model(path, n_ctx=2048, n_threads=2, tree_sequences=TREE_SEQUENCES) as full:
        prompt = small.tokenize("The quick brown fox jumps over the lazy dog. " * 60,
                                parse_special=False)[:509]
        tree = [prompt[-1], *small.tokenize(" a b c d e")[:5]]
        for m in (small, full):
            m.eval(prompt[:-1], [-1])
        assert small.allocated == 512  # 508 cached and 6 rows do not fit
        rows = small.eval_tree(tree, TREE_PARENTS)
        assert small.allocated == 1024
        assert np.array_equal(rows, full.eval_tree(tree, TREE_PARENTS))
        for m in (small, full):
            m.keep_path([1, 3])
        assert list(small.tokens) == list(full.tokens) and consistent(small)
        assert np.array_equal(small.eval([tree[5]], [0]), full.eval([tree[5]], [0]))
