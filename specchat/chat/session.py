"""One chat session: asking, streaming an answer, keeping it, and the state slash commands edit.

No prompt-toolkit here (that is repl.py), so the turn logic can be driven directly by tests
and by the one-shot piped mode.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specchat.backend.base import Backend, Message
from specchat.chat import ending
from specchat.chat.attach import (
    Attachment,
    check_fits,
    compose,
    read_attachment,
    token_count,
)
from specchat.chat.chatlog import ChatLog, load_conversation, save_copy
from specchat.chat.conversation import Conversation, Turn
from specchat.chat.render import Renderer
from specchat.chat.tally import Tally
from specchat.engine.events import Finished, Progress, drain
from specchat.engine.options import GenerationOptions, OptionError, Spec
from specchat.engine.protocol import ContextFullError
from specchat.errors import SpecchatError, UsageError
from specchat.fileio import FileIOError, describe
from specchat.term.output import OutputError


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
    chatlog: ChatLog = field(default_factory=ChatLog)
    errors: ErrorLog = field(default_factory=ErrorLog)
    tally: Tally = field(default_factory=Tally)
    pending: list[Attachment] = field(default_factory=list)  # files for the next message
    attached_tokens: int = 0  # what files attached in this session took
    plain: bool = False  # --plain / /set plain: no Markdown
    wants_show_draft: bool = False  # --show-draft (the renderer may be unable to colour)
    unsaved: bool = False  # saving failed and it was said: quiet until a save works again

    # --- turns ------------------------------------------------------------------------
    def attach(self, name: str) -> int:
        """Read a file for the next message (/read, -f); returns the tokens it takes."""
        attachment = read_attachment(name)
        n_ctx = self.runtime.n_ctx
        tokens = 0  # a remote server's tokenizer is its own: not counted here
        if n_ctx is not None:
            tokens = token_count(attachment, self.runtime.text_tokens)
            check_fits(attachment, tokens, n_ctx)
        self.pending.append(attachment)
        self.attached_tokens += tokens
        return tokens

    def ask(self, text: str, attachments: list[Attachment] | None = None) -> Turn | None:
        """Answer `text` (after any attached files) with the whole conversation; keep the turn
        (even a partial one)."""
        files = list(self.pending if attachments is None else attachments)
        messages = self._fit(compose(files, text))
        shown: list[Any] = []  # the answer view, once open: the prefill runs inside it

        def progress(p: Progress) -> None:
            if shown:
                shown[0].progress(p)
        events = self.runtime.answer(messages, self.options, progress=progress)
        finished: Finished | None = None
        interrupted = False
        lost: OSError | None = None  # the terminal or stdout refused the answer
        try:
            with self.renderer.answer() as view:
                shown.append(view)
                try:
                    finished = drain(events, view.chunk)
                except KeyboardInterrupt:
                    interrupted = True
                except OSError as exc:  # a closed terminal (SIGHUP), a full disk: keep the turn
                    interrupted, lost = True, exc
                except ContextFullError as exc:
                    self.renderer.error(f"context full ({exc}): /clear, /undo, or raise --ctx")
                    return None
                with ending.held():  # a signal now cannot tear the record
                    turn = self._commit(text, view.text, finished, interrupted, view, files)
                if lost is None:
                    view.finish(finished, interrupted)
        except OSError as exc:  # taking the live view down, or the finished answer
            lost = exc
        ending.leave_if_ended()  # a terminal gone with SIGHUP: saved, leave quietly
        if lost is not None:
            raise OutputError(f"cannot write the answer: {describe(lost)} (the turn is "
                              "saved)") from None
        return turn

    def _fit(self, text: str) -> list[Message]:
        """The messages to send: locally, oldest turns left out when the context is full;
        a remote server (no n_ctx here) enforces its own context."""
        n_ctx = self.runtime.n_ctx
        if n_ctx is not None:
            reserve = min(self.options.max_tokens, max(n_ctx // 4, 1))
            fitted = self.conversation.fit(text, self.runtime.prompt_tokens, n_ctx, reserve)
            if fitted.newly_dropped:
                self.renderer.note(
                    f"context full: the {fitted.newly_dropped} oldest turn"
                    f"{'s' if fitted.newly_dropped > 1 else ''} left out of the prompt from "
                    "now on (still in the saved conversation)")
        return self.conversation.messages(text)

    def _commit(self, text: str, partial: str, finished: Finished | None,
                interrupted: bool, view: Any, files: list[Attachment]) -> Turn | None:
        """Keep the turn and write it to disk right away, before anything is printed."""
        stats = finished.stats if finished is not None else view.stats
        answer = finished.text if finished is not None else partial
        if interrupted and not answer and ending.code() is None:
            # Ctrl-C before a word: no turn to keep (the question is in the input history).
            # A signal that ends the chat keeps it: there is no next line to press Up on.
            return None
        turn = Turn(user=text, assistant=answer, interrupted=interrupted,
                    reason=finished.reason if finished is not None else "",
                    stats=stats.to_dict() if stats is not None else None,
                    attachments=files)
        self.pending = []  # sent: the files now live in the turn
        self.conversation.add(turn)
        self.record({"type": "turn", **turn.to_dict()})
        if stats is not None:
            self.tally.add(stats, interrupted)
        return turn

    def regen(self) -> Turn | None:
        last = self.conversation.undo()
        if last is None:
            raise UsageError("nothing to regenerate yet")
        self.record({"type": "undo"})
        if self.options.sampling.greedy:
            self.renderer.dim("temperature is 0, so the answer will be the same "
                              "(/set temperature 0.7 for a different one)")
        return self.ask(last.user, attachments=last.attachments)

    def undo(self) -> Turn:
        last = self.conversation.undo()
        if last is None:
            raise UsageError("nothing to undo")
        self.record({"type": "undo"})
        return last

    # --- state ------------------------------------------------------------------------
    def clear(self) -> None:
        """Start over in a new conversation file; the system prompt is kept."""
        system = self.conversation.system
        self.conversation = Conversation(system=system)
        self.chatlog = ChatLog(meta=self.chatlog.meta)
        if system:
            self.chatlog.seed(self.conversation)

    def set_system(self, text: str) -> None:
        self.conversation.system = text
        self.record({"type": "system", "text": text})

    def record(self, record: dict[str, Any]) -> None:
        """Append to the conversation file; a failure is said at once and the chat goes on.

        The record stays pending in the chat log (and the turn in memory), so it is written with
        the next record once there is space again, and /save can keep it elsewhere now.
        """
        try:
            self.chatlog.append(record)
        except FileIOError as exc:
            if not self.unsaved:  # a read-only or full disk is said once, not every turn
                self.renderer.error(f"not saved: {exc} (the chat goes on; /save FILE keeps "
                                    "it elsewhere)")
            self.unsaved = True
        else:
            self.unsaved = False

    def check_saving(self) -> None:
        """Say at the start, once, when turns cannot be saved (a read-only state directory):
        the chat goes on without saving."""
        problem = self.chatlog.problem()
        if problem is not None:
            self.renderer.note(f"turns will not be saved: {problem} (the chat goes on; "
                               "/save FILE keeps a copy elsewhere)")
            self.unsaved = True

    def load(self, path: Path) -> None:
        """Continue from a saved file; new turns go to a new file, the loaded one stays."""
        conversation = load_conversation(path)
        self.conversation = conversation
        self.chatlog = ChatLog(meta={**self.chatlog.meta, "loaded_from": str(path)})
        self.chatlog.seed(conversation)

    def save(self, path: Path, *, overwrite: bool = False) -> None:
        save_copy(self.conversation, path, overwrite=overwrite)

    def set_options(self, **values: Any) -> GenerationOptions:
        """Validated through GenerationOptions and the runtime (a mode it cannot honour)."""
        try:
            options = self.options.with_values(**values)
        except (OptionError, TypeError) as exc:
            raise UsageError(str(exc)) from None
        self.runtime.effective_options(options)  # raises UsageError if it cannot run
        self.options = options
        return options

    def use_runtime(self, runtime: Backend, spec: Spec | None = None) -> None:
        """Answer with `runtime` from now on (after /model or /draft); the turns stay."""
        self.runtime = runtime
        options = self.options.with_values(spec=spec) if spec else self.options
        self.options = runtime.effective_options(options)
        self.renderer.draft_name = runtime.info.draft_name
        self.renderer.token_bytes = runtime.token_bytes
        models = {"model": runtime.info.target_name, "draft": runtime.info.draft_name}
        self.chatlog.meta.update(models)
        if self.chatlog.started:
            self.chatlog.append({"type": "models", **models})

    def context_use(self) -> tuple[int, int] | None:
        """Tokens the conversation takes now (as the next prompt would send it), and n_ctx;
        None for a remote server, whose tokenizer and context are its own."""
        n_ctx = self.runtime.n_ctx
        if n_ctx is None:
            return None
        messages = self.conversation.messages()
        # Nothing said yet takes nothing: some templates (Qwen's) fail on an empty list.
        return (len(self.runtime.prompt_tokens(messages)) if messages else 0), n_ctx

    def report(self, exc: BaseException) -> None:
        """An error as one line; the traceback only into the --verbose log."""
        if isinstance(exc, SpecchatError):
            self.renderer.error(str(exc))
            return
        self.errors.record(exc)
        self.renderer.error(f"{type(exc).__name__}: {exc} ({self.errors.hint()})")
