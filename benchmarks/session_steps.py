"""Steps of one built-in session, `auto` and `off` alternating (docs/drafting.md).

One built-in session in one process, `auto` and `off` alternating request by request:
what each verify batch size cost against the plain steps of the `off` answer beside it.

    SPECCHAT_DRAFT_STORE_DIR=/tmp/steps-store python benchmarks/session_steps.py convert-customers

Per request: auto's speed over off's, tokens per step, drafting work per step, and for every
batch size `auto` verified, how many and their median cost in plain steps of `off` (the
prefill is left out). `auto`'s answers go to the drafting store named by the environment
(use an empty one). It shows how much a request's timing moves with identical work here.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from specchat.backend.draftstore import record_start
from specchat.backend.loading import open_runtime
from specchat.bench.sessions import load_sessions
from specchat.engine.events import Finished
from specchat.engine.options import GenerationOptions, Spec
from specchat.settings.load import LoadSettings


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("session")
    ap.add_argument("-m", "--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("-n", "--max-tokens", type=int, default=128)
    args = ap.parse_args()
    session = {s.name: s for s in load_sessions(None)}[args.session]
    with open_runtime(LoadSettings(model=args.model, spec=Spec.AUTO)) as rt:
        log: list[tuple[int, float]] = []
        real = rt.target.eval

        def timed(tokens: Sequence[int], logit_rows: Sequence[int]) -> np.ndarray:
            t = time.perf_counter()
            out = real(tokens, logit_rows)
            log.append((len(tokens), time.perf_counter() - t))
            return out

        rt.target.eval = timed  # type: ignore[method-assign]
        for i, request in enumerate(session.requests):
            messages = session.messages(request)
            tokens = rt.chat_tokens(messages)
            seen: dict[str, tuple[Any, list[tuple[int, float]]]] = {}
            for mode in ("off", "auto") if i % 2 else ("auto", "off"):
                rt.target.truncate(0)
                log.clear()
                events = rt.stream(tokens, GenerationOptions(max_tokens=args.max_tokens,
                                                             spec=Spec(mode)))
                if mode == "auto":
                    events = rt.kept(events, tokens[record_start(rt.chat_tokens, messages,
                                                                 tokens):])
                *_, fin = events
                assert isinstance(fin, Finished)
                seen[mode] = (fin.stats, log[1:])  # the first call is the prefill
            plain = statistics.median(dt for n, dt in seen["off"][1] if n == 1)
            sizes: dict[int, list[float]] = defaultdict(list)
            for n, dt in seen["auto"][1]:
                sizes[n].append(dt / plain)
            auto, off = seen["auto"][0], seen["off"][0]
            speed = (auto.generated / auto.decode_seconds) / (off.generated / off.decode_seconds)
            print(f"{args.session} {i + 1}: auto/off {speed:.3f}, "
                  f"{auto.generated / auto.steps:.2f} tokens/step, drafting "
                  f"{auto.draft_seconds / auto.steps * 1000:.2f} ms/step; batches "
                  + " ".join(f"{n}x{len(v)}@{statistics.median(v):.2f}"
                             for n, v in sorted(sizes.items())), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
