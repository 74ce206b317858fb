"""Slash commands that change what the next answer is made from: /read, /model, /draft."""

from __future__ import annotations

from collections.abc import Sequence

from specchat.backend.base import KEEP
from specchat.chat.session import ChatSession
from specchat.engine.options import Spec
from specchat.errors import UsageError
from specchat.models.complete import model_candidates
from specchat.settings.schema import NO_DRAFT


def read(session: ChatSession, arg: str) -> None:
    """/read PATH: the file's text goes with the next message (a bad file: one line)."""
    name = arg.strip()
    if not name:
        raise UsageError("/read needs a file: /read PATH")
    tokens = session.attach(name)
    count = len(session.pending)
    session.renderer.dim(f"attached {name} ({tokens} tokens); {count} file"
                         f"{'s' if count > 1 else ''} will go with your next message")


def attachment_lines(session: ChatSession) -> list[str]:
    """/stats: what attached files took."""
    sent = sum(len(t.attachments) for t in session.conversation.turns)
    lines = []
    if session.attached_tokens or sent:
        lines.append(f"attachments: {session.attached_tokens} tokens read this session; "
                     f"{sent} file{'s' if sent != 1 else ''} in the conversation")
    if session.pending:
        names = ", ".join(a.name for a in session.pending)
        lines.append(f"waiting for your next message: {names}")
    return lines


def model(session: ChatSession, arg: str) -> None:
    """/model NAME: another target; the conversation stays and is re-read by the new one."""
    name = arg.strip()
    if not name:
        session.renderer.info(f"model: {session.runtime.info.target_name}  "
                              f"{session.runtime.info.target_path}")
        return
    _switch(session, model=name)


def draft(session: ChatSession, arg: str) -> None:
    """/draft NAME|none: another draft model, or none."""
    name = arg.strip()
    if not name:
        session.renderer.info(f"draft: {session.runtime.info.draft_name or 'none'}")
        return
    none = name.lower() == NO_DRAFT
    spec = session.options.spec
    if not none and not spec.uses_draft_model:
        spec = Spec.DRAFT  # asking for a draft model means drafting with it
    elif none and spec is Spec.DRAFT:
        spec = Spec.AUTO  # nothing left to draft with; auto still uses prompt lookup
    _switch(session, draft=NO_DRAFT if none else name, spec=spec)


def use_mode(session: ChatSession, mode: str) -> bool:
    """/mode and /set spec: answer in `mode` from now on. Draft mode loads the draft model
    a chat in auto left out (loading.draft_not_worth_loading); True when it did."""
    info = session.runtime.info
    if Spec(mode) is Spec.DRAFT and info.draft_name is None and info.draft_not_loaded:
        session.renderer.dim("loading the draft model for draft mode")
        _switch(session, spec=Spec.DRAFT)
        return True
    session.set_options(spec=mode)
    return False


def _switch(session: ChatSession, *, model: str | None = KEEP,
            draft: str | None = KEEP, spec: Spec | None = None) -> None:
    old = session.runtime
    mode = spec or session.options.spec
    try:
        new = old.switch(model=model, draft=draft, spec=mode)
    except KeyboardInterrupt:
        raise UsageError("switch interrupted; still using "
                         f"{old.info.target_name}") from None
    except Exception as exc:  # noqa: BLE001 - any load failure: keep chatting on the old one
        raise UsageError(f"{_reason(exc)}; still using {old.info.target_name}"
                         + (f" + {old.info.draft_name}" if old.info.draft_name else "")) \
            from None
    session.use_runtime(new, spec=mode)
    info = new.info
    use = session.context_use()
    used, n_ctx = use if use is not None else (0, 0)
    reread = (info.target_name, info.target_path) != (old.info.target_name, old.info.target_path)
    session.renderer.dim(
        f"now {info.target_name}" + (f" + draft {info.draft_name}" if info.draft_name else "")
        + f" · mode {session.options.spec}"
        + (f" · the conversation ({used} of {n_ctx} tokens) is read again by the new target "
           "with your next message" if reread and used else ""))


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def complete_models(session: ChatSession, words: Sequence[str]) -> list[str]:
    return model_candidates(words[-1] if words else "") if len(words) <= 1 else []


def complete_drafts(session: ChatSession, words: Sequence[str]) -> list[str]:
    return ["none", *complete_models(session, words)] if len(words) <= 1 else []
