"""Errors that reach the user as one line and an exit code, never as a traceback."""

from __future__ import annotations

EXIT_OK = 0
EXIT_RUNTIME = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class SpecchatError(Exception):
    """A failure the user can act on: the message says what to do."""

    exit_code: int = EXIT_RUNTIME

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(SpecchatError):
    """Bad input from the user: bad option, unknown preset, incompatible draft. `param`
    names the request field at fault, for the HTTP API's 400."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str, exit_code: int | None = None, *,
                 param: str | None = None) -> None:
        super().__init__(message, exit_code)
        if param is not None:
            self.param = param


class PromptTooLong(UsageError):
    """A prompt that leaves no room for an answer in the context."""

    def __init__(self, tokens: int, n_ctx: int, *, at_least: bool = False) -> None:
        over = tokens - n_ctx + 1
        bound = "at least " if at_least else ""  # counted without tokenizing (too long to)
        super().__init__(f"prompt is {bound}{tokens} tokens, {bound}{over} over what a context "
                         f"of {n_ctx} leaves for an answer: raise --ctx or shorten the prompt")
        self.tokens = tokens
        self.n_ctx = n_ctx
        self.at_least = at_least


class ModelError(SpecchatError):
    """A model file that cannot be used (missing, not GGUF, failed to load)."""


class DownloadError(SpecchatError):
    """A download that failed; nothing half-written is left behind."""


class Interrupted(SpecchatError):
    """Ctrl-C outside an answer (an answer stopped by Ctrl-C is not an error: it is kept)."""

    exit_code = EXIT_INTERRUPTED


class Cancelled(SpecchatError):
    """An answer stopped because nobody waits for it any more (a server's client left)."""
