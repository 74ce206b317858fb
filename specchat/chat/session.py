"""One chat session: asking, streaming an answer, keeping it, and the state slash commands edit.

No prompt-toolkit here (that is repl.py), so the turn logic can be driven directly by tests
and by the one-shot piped mode.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specchat.chat.conversation import Conversation, Turn
from specchat.chat.render import Renderer
from specchat.chat.store import Store, load_conversation, save_copy
from specchat.chat.tally import Tally
from specchat.engine.events import Chunk, Finished
from specchat.engine.options import GenerationOptions, OptionError
from specchat.engine.protocol import ContextFullError
from specchat.errors import SpecchatError, UsageError
from specchat.runtime import Backend, Message


@dataclass
class ErrorLog:
    """Where tracebacks go with --verbose; None path means 'say: rerun with --verbose'."""

    path: Path | None = None
    logger: logging.Logger | None = None

    def hint(self) -> str:
        return f"details in {self.path}" if self.path else "rerun with --verbose for details"

    def record(self, exc: BaseException) -> None:
        if self.logger is not None:
            self.logger.error("unexpected error", exc_info=exc)


@dataclass
class ChatSession:
    runtime: Backend
    options: GenerationOptions
    renderer: Renderer
    conversation: Conversation = field(default_factory=Conversation)
    store: Store = field(default_factory=Store)
    errors: ErrorLog = field(default_factory=ErrorLog)
    tally: Tally = field(default_factory=Tally)

    # --- turns ------------------------------------------------------------------------
    def ask(self, text: str) -> Turn | None:
        """Answer `text` with the whole history; keep the turn (even a partial one)."""
        events = self.runtime.answer(self._fit(text), self.options)
        finished: Finished | None = None
        interrupted = False
        with self.renderer.answer() as view:
            try:
                for event in events:
                    if isinstance(event, Chunk):
                        view.chunk(event)
                    elif isinstance(event, Finished):
                        finished = event
            except KeyboardInterrupt:
                interrupted = True
            except ContextFullError as exc:
                self.renderer.error(f"context full ({exc}): /clear, /undo, or raise --ctx")
                return None
            finally:
                # Closing runs the engine's cleanup, which leaves the KV caches consistent
                # (a no-op when the generator already finished or raised).
                close = getattr(events, "close", None)
                if close is not None:
                    close()
            turn = self._commit(text, view.text, finished, interrupted, view)
            view.finish(finished, interrupted)
        return turn

    def _fit(self, text: str) -> list[Message]:
        """The messages to send: locally, oldest turns left out when the context is full;
        a remote server (no n_ctx here) enforces its own context."""
        n_ctx = self.runtime.n_ctx
        if n_ctx is not None:
            reserve = min(self.options.max_tokens, max(n_ctx // 4, 1))
            tokenize = self.runtime.chat_tokens
            assert tokenize is not None  # local models: both or neither
            fitted = self.conversation.fit(text, tokenize, n_ctx, reserve)
            if fitted.newly_dropped:
                self.renderer.note(
                    f"context full: the {fitted.newly_dropped} oldest turn"
                    f"{'s' if fitted.newly_dropped > 1 else ''} left out of the prompt from "
                    "now on (still in the saved conversation)")
        return self.conversation.messages(text)

    def _commit(self, text: str, partial: str, finished: Finished | None,
                interrupted: bool, view: Any) -> Turn | None:
        """Keep the turn and write it to disk right away, before anything is printed."""
        stats = finished.stats if finished is not None else view.stats
        answer = finished.text if finished is not None else partial
        if interrupted and not answer:
            return None  # nothing was said yet: no turn to keep (the question is in history)
        turn = Turn(user=text, assistant=answer, interrupted=interrupted,
                    reason=finished.reason if finished is not None else "",
                    stats=stats.to_dict() if stats is not None else None)
        self.conversation.add(turn)
        self.store.append({"type": "turn", **turn.to_dict()})
        if stats is not None:
            self.tally.add(stats, interrupted)
        return turn

    def regen(self) -> Turn | None:
        last = self.conversation.undo()
        if last is None:
            raise UsageError("nothing to regenerate yet")
        self.store.append({"type": "undo"})
        if self.options.sampling.greedy:
            self.renderer.dim("temperature is 0, so the answer will be the same "
                              "(/set temperature 0.7 for a different one)")
        return self.ask(last.user)

    def undo(self) -> Turn:
        last = self.conversation.undo()
        if last is None:
            raise UsageError("nothing to undo")
        self.store.append({"type": "undo"})
        return last

    # --- state ------------------------------------------------------------------------
    def clear(self) -> None:
        """Start over in a new conversation file; the system prompt is kept."""
        system = self.conversation.system
        self.conversation = Conversation(system=system)
        self.store = Store(meta=self.store.meta)
        if system:
            self.store.seed(self.conversation)

    def set_system(self, text: str) -> None:
        self.conversation.system = text
        self.store.append({"type": "system", "text": text})

    def load(self, path: Path) -> None:
        """Continue from a saved file; new turns go to a new file, the loaded one stays."""
        conversation = load_conversation(path)
        self.conversation = conversation
        self.store = Store(meta={**self.store.meta, "loaded_from": str(path)})
        self.store.seed(conversation)

    def save(self, path: Path) -> None:
        try:
            save_copy(self.conversation, path)
        except OSError as exc:
            raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None

    def set_options(self, **values: Any) -> GenerationOptions:
        """Validated through GenerationOptions and the runtime (a mode it cannot honour)."""
        try:
            options = self.options.with_values(**values)
        except (OptionError, TypeError) as exc:
            raise UsageError(str(exc)) from None
        self.runtime.effective_options(options)  # raises UsageError if it cannot run
        self.options = options
        return options

    def context_use(self) -> tuple[int, int] | None:
        """Tokens the history takes now (as the next prompt would send it), and n_ctx;
        None for a remote server, whose tokenizer and context are its own."""
        n_ctx = self.runtime.n_ctx
        if n_ctx is None:
            return None
        tokenize = self.runtime.chat_tokens
        assert tokenize is not None  # local models: both or neither
        return len(tokenize(self.conversation.messages())), n_ctx

    def report(self, exc: BaseException) -> None:
        """An error as one line; the traceback only into the --verbose log."""
        if isinstance(exc, SpecchatError):
            self.renderer.error(str(exc))
            return
        self.errors.record(exc)
        self.renderer.error(f"{type(exc).__name__}: {exc} ({self.errors.hint()})")
