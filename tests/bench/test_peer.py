"""The llama-cpp baseline in `specchat bench`: timed from outside, side by side, in the
rotation; a fake Llama and injected clocks stand in for llama-cpp-python (the real one runs
in the real-model bench test)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from specchat.bench import prompts as bp
from specchat.bench.peer import PEER, ChatCompletionPeer
from specchat.bench.report import OVERALL, summarize, summary_to_dict
from specchat.bench.runner import run_bench
from specchat.engine.options import GenerationOptions
from tests.support.fake_runtime import fake_runtime


class FakeLlama:
    """Just what ChatCompletionPeer touches: reset, n_tokens, generate (which
    create_chat_completion calls through the instance, as llama-cpp-python does)."""

    def __init__(self, now: list[float], answer: list[int], step: float) -> None:
        self.now, self.answer, self.step = now, answer, step
        self.n_tokens = 0
        self.resets = 0
        self.asked: list[dict[str, Any]] = []

    def reset(self) -> None:
        self.resets += 1
        self.n_tokens = 0

    def generate(self, prompt: list[int], **_: Any) -> Iterator[int]:
        self.now[0] += 2.0  # prefill
        self.n_tokens = len(prompt)
        for token in self.answer:
            self.now[0] += self.step
            yield token
            self.n_tokens += 1

    def create_chat_completion(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        self.asked.append(kwargs)
        yield {"choices": [{"delta": {"role": "assistant"}, "finish_reason": None}]}
        for token in self.generate([1] * 7):
            yield {"choices": [{"delta": {"content": f"t{token}"}, "finish_reason": None}]}
        yield {"choices": [{"delta": {}, "finish_reason": "length"}]}


def test_the_peer_is_timed_per_token_from_outside() -> None:
    now = [100.0]
    llm = FakeLlama(now, [5, 6, 7, 8], step=0.5)
    peer = ChatCompletionPeer(llm, clock=lambda: now[0])
    prompt = bp.BenchPrompt("q1", "rag", "question?")
    record = peer.run(prompt, 2, max_tokens=4, seed=3)
    assert llm.resets == 1  # a full prefill every run
    assert llm.asked[0]["messages"] == [{"role": "user", "content": "question?"}]
    assert llm.asked[0]["temperature"] == 0.0 and llm.asked[0]["max_tokens"] == 4
    assert record.tokens == [5, 6, 7, 8] and record.text == "t5t6t7t8"
    assert record.prompt_tokens == 7 and record.finish_reason == "length"
    assert record.first_chunk_seconds == 2.5  # prefill and the first token
    assert record.decode_seconds == 1.5 and record.last_chunk_seconds == 4.0
    assert "generate" not in vars(llm)  # the timing wrapper is gone again


def test_vs_lcp_compares_speeds_after_the_first_token() -> None:
    now = [0.0]
    runtime = fake_runtime()
    tokens_of_off: list[int] = []
    peer = ChatCompletionPeer(FakeLlama(now, list(range(10)), step=0.25), clock=lambda: now[0])
    prompts = [bp.BenchPrompt(str(i), "qa", f"q{i}") for i in range(2)]
    ticks = iter(float(i) for i in range(10_000))
    result = run_bench(runtime, prompts, ["off", PEER], GenerationOptions(max_tokens=10),
                       warmup=False, clock=lambda: next(ticks), peer=peer)
    modes = [r.mode for r in result.records]
    assert modes == ["off", PEER, PEER, "off"]  # the peer takes its turn in the rotation
    off = [r for r in result.records if r.mode == "off"]
    tokens_of_off = [r.generated - r.first_tokens for r in off]
    seconds_of_off = [r.last_chunk_seconds - r.first_chunk_seconds for r in off]
    summary = summarize(result.records, ["off", PEER])
    rate_off = sum(tokens_of_off) / sum(seconds_of_off)
    rate_peer = 9 / (9 * 0.25)
    assert summary[OVERALL][PEER].outside_tokens_per_second == pytest.approx(rate_peer)
    assert summary[OVERALL]["off"].speedup_outside(summary[OVERALL][PEER]) == pytest.approx(
        rate_off / rate_peer)
    doc = summary_to_dict(summary)
    assert doc[OVERALL]["off"]["vs_" + PEER] == pytest.approx(rate_off / rate_peer)
    assert doc[OVERALL][PEER]["vs_" + PEER] == pytest.approx(1.0)
