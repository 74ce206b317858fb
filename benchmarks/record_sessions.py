"""The built-in sessions recorded for the sweep (specchat/bench/recordings/README.md).

Each request of each session is answered greedily and plainly by the target, as a fresh
one-shot question (its session's system prompt, then the request: what `bench --sessions`
sends), and the draft is teacher-forced along the answer (bench/recording.py). The question
id is `SESSION/INDEX/CUT`: the request's place in its session and where the part of the
prompt the drafting store keeps starts (backend/draftstore.record_start), so a replay can
feed the store what `ask` would have written. Category: the session's name.

    python benchmarks/record_sessions.py OUT.json [SESSIONS.jsonl] [-n 128]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from specchat.backend.draftstore import record_start
from specchat.backend.loading import open_runtime
from specchat.bench import recording as rec
from specchat.bench.sessions import load_sessions
from specchat.engine.events import Finished, drain
from specchat.engine.options import GenerationOptions, Spec
from specchat.settings.load import LoadSettings


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("sessions", nargs="?")
    parser.add_argument("-n", "--max-tokens", type=int, default=128)
    args = parser.parse_args(argv)
    sessions = load_sessions(Path(args.sessions) if args.sessions else None)
    options = GenerationOptions(max_tokens=args.max_tokens, spec=Spec.OFF)
    items: list[rec.Recorded] = []
    with open_runtime(replace(LoadSettings(), spec=Spec.DRAFT)) as rt:
        for s in sessions:
            for i, request in enumerate(s.requests):
                messages = s.messages(request)
                tokens = rt.chat_tokens(messages)
                rt.target.truncate(0)
                finished = drain(rt.stream(tokens, options))
                assert isinstance(finished, Finished)
                answer = tuple(finished.tokens)
                assert rt.draft is not None and rt.vocabs is None
                forced = rec.teacher_forced(rt.draft, rt.target.n_vocab, tokens, answer)
                cut = record_start(rt.chat_tokens, messages, tokens)
                items.append(rec.Recorded(
                    f"{s.name}/{i}/{cut}", s.name, tuple(tokens), answer, finished.reason,
                    tuple(t for t, _ in forced), tuple(round(c, 3) for _, c in forced)))
                print(f"{s.name}/{i}: {len(tokens)} + {len(answer)}", file=sys.stderr)
        info = rt.info
        recording = rec.Recording(Path(info.target_path).name,
                                  Path(info.draft_path).name if info.draft_path else None,
                                  args.sessions or "<built-in default_sessions.jsonl>",
                                  args.max_tokens, frozenset(rt.target.eog_tokens),
                                  tuple(items))
    rec.save(recording, Path(args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
