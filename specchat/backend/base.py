"""What answers: the one contract the chat, `ask`, `serve` and `bench` use, whether the models
run here (local.Runtime) or on another server (remote.RemoteRuntime).

Token ids, the context size and the KV cache exist only for local models; a remote backend
says so with `n_ctx is None`, and callers then never ask it for tokens. Everything a caller
needs is declared here, so no caller has to probe a backend for what it happens to have.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

from specchat.backend.clients import Client
from specchat.engine.events import Event
from specchat.engine.loop import ProgressCallback
from specchat.engine.options import GenerationOptions, Spec
from specchat.engine.stats import Stats
from specchat.errors import UsageError
from specchat.llm.tools import ToolSet

# {"role", "content"}, plus OpenAI's "tool_calls" (an assistant's calls) and "tool_call_id"
# (a tool result) where the conversation has tools; content may then be None.
Message = dict[str, Any]
Events = Generator[Event, None, None]
KEEP = "\0keep"  # Backend.switch(): leave this model as it is


@dataclass
class RuntimeInfo:
    """What /show and --json report about the loaded models."""

    target_name: str
    target_path: str = ""
    draft_name: str | None = None
    draft_path: str | None = None
    draft_found: bool = False  # the draft was found on this machine, not named (pairing.py)
    # Why the draft that would have been loaded was not (an auto-only answer on a machine
    # where it cannot pay: loading.py); None when it was, or when there is none.
    draft_not_loaded: str | None = None
    # The draft has another vocabulary than the target's: it drafts text (engine/textdraft.py)
    draft_text: bool = False
    template_note: str = ""
    template_is_fallback: bool = False
    notes: list[str] = field(default_factory=list)
    gpu: str = ""  # what --n-gpu-layers auto chose, one line ("" when not asked or CPU only)
    gpu_layers: str = ""  # the same as "TARGET/DRAFT" n_gpu_layers values
    endpoint: str | None = None  # the server that answers, for --endpoint


class Backend(ABC):
    """Answers conversations; `with` closes it."""

    info: RuntimeInfo

    @property
    @abstractmethod
    def n_ctx(self) -> int | None:
        """The context size in tokens; None when a server enforces its own."""

    @property
    def token_bytes(self) -> Callable[[int], bytes] | None:
        """A token's bytes (for --show-draft's colours); None without local token ids."""
        return None

    def prompt_tokens(self, messages: Sequence[Message]) -> list[int]:
        """The chat prompt for `messages` as token ids (only when n_ctx is not None)."""
        raise UsageError("the server's tokenizer is its own: no token counts here")

    def text_tokens(self, text: str) -> list[int]:
        """Plain text as token ids, nothing parsed as control tokens (n_ctx not None)."""
        raise UsageError("the server's tokenizer is its own: no token counts here")

    @abstractmethod
    def answer(self, messages: Sequence[Message], options: GenerationOptions,
               progress: ProgressCallback | None = None, tools: ToolSet | None = None
               ) -> Events:
        """The answer's events; `progress` hears how the prompt is read (local models).
        A prompt that leaves no room for an answer raises PromptTooLong at once.
        `tools`: functions the model may call (its calls come back as text in the model's
        tool-call format, llm/tools.py reads them); UsageError where not supported."""

    @abstractmethod
    def complete(self, prompt: str | Sequence[int], options: GenerationOptions,
                 progress: ProgressCallback | None = None) -> Events:
        """A raw completion of `prompt`, text or token ids (no chat template); like answer()
        otherwise."""

    @abstractmethod
    def effective_options(self, options: GenerationOptions) -> GenerationOptions:
        """`options` as this backend will run them; UsageError for what it cannot honour."""

    def cached_tokens(self) -> int | None:
        """Tokens the KV cache holds now (None: not known here)."""
        return None

    def stats_lines(self, options: GenerationOptions) -> list[str]:
        """Backend-specific lines for /stats."""
        return []

    def explain(self, stats: Stats) -> dict[str, Any] | None:
        """Why `auto` drafted what it drafted in the answer `stats` describes (--json)."""
        return None

    def for_client(self, client: Client) -> Backend:
        """This backend answering `client` of a server: its own drafting store and `auto`
        state, never another client's (backend/clients.py). Shares the models."""
        return self

    def cancel_when(self, cancelled: Callable[[], bool] | None) -> None:
        """Until called again with None, a long model call (a prefill chunk) stops part way
        once `cancelled()` is true, and the answer raises errors.Cancelled; for a thread
        where Ctrl-C cannot arrive (a server's worker). Where models cannot stop part way,
        nothing: the answer stops at its next step."""
        return None

    def switch(self, *, model: str | None = KEEP, draft: str | None = KEEP,
               spec: Spec | None = None) -> Backend:
        """A backend with another target and/or draft; this one is closed only on success."""
        raise UsageError(f"the server at {self.info.endpoint} chooses its own models: "
                         "restart with another --model to use one of its others")

    def chosen_models(self) -> dict[str, str | None]:
        """The `model` and `draft` option values that chose these models (/save-settings);
        empty when they were not chosen here."""
        return {}

    @abstractmethod
    def close(self) -> None:
        """Free the models (or the connection); safe to call twice."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
