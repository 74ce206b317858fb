"""The typer app. Each command lives in specchat/commands/; this file only wires them up.

`specchat "prompt"` and `git diff | specchat "prompt"` are one-shot answers (the `ask`
command); bare `specchat` in a terminal opens the chat.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence
from typing import Annotated, Any

import typer

from specchat import __version__
from specchat.errors import EXIT_INTERRUPTED, EXIT_RUNTIME, Interrupted, SpecchatError
from specchat.term import output
from specchat.term.safe import for_stream, note

app = typer.Typer(
    name="specchat",
    help=f"Chat with a local GGUF model, faster through exact speculative decoding "
    f"(specchat {__version__}).",
    no_args_is_help=False,
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish)
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _show_version(value: bool) -> None:
    if value:
        output.write(f"specchat {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.",
                                          is_eager=True, callback=_show_version)] = False,
) -> None:
    """The app's own options; the commands do the work."""


def _register_commands() -> None:
    from specchat.commands import (
        ask,
        bench,
        chat,
        config,
        doctor,
        history,
        models,
        serve,
    )

    for module in (ask, chat, history, config, models, bench, doctor, serve):
        module.register(app)
    for info in app.registered_commands:
        if info.callback is not None:
            info.callback = _guarded(info.callback)


def _guarded(callback: Callable[..., Any]) -> Callable[..., Any]:
    """Ctrl-C and a closed stdout as our own exceptions, before click sees them: click would
    print a blank line and 'Aborted' for one and exit 1 for the other."""

    @functools.wraps(callback)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return callback(*args, **kwargs)
        except KeyboardInterrupt:
            raise Interrupted("interrupted") from None
        except BrokenPipeError:
            raise output.OutputClosed from None

    return run


_register_commands()

# What may come first on the command line without naming a command.
_ROOT_OPTIONS = {"--help", "-h", "--version", "--install-completion", "--show-completion"}


def _command_names() -> set[str]:
    names = {c.name or c.callback.__name__ for c in app.registered_commands if c.callback}
    names |= {g.name for g in app.registered_groups if g.name}
    return names | _ROOT_OPTIONS


def route_argv(argv: Sequence[str], stdin_is_tty: bool) -> list[str]:
    """Pick the command when none is named: a prompt (or piped stdin) means `ask`; in a
    terminal, options alone (`specchat -m smollm2-135m`) mean `chat`."""
    args = list(argv)
    if not args:
        return ["chat"] if stdin_is_tty else ["ask"]
    if args[0] in _command_names():
        return args
    if stdin_is_tty and not _has_prompt(args):
        return ["chat", *args]
    return ["ask", *args]


def _has_prompt(args: list[str]) -> bool:
    """Whether `ask` would find prompt words among args (options and their values aside)."""
    group = typer.main.get_command(app)
    ask = group.commands.get("ask") if isinstance(group, typer.core.TyperGroup) else None
    if ask is None:
        return True
    try:
        ctx = ask.make_context("ask", list(args), resilient_parsing=True)
    except Exception:  # noqa: BLE001 - any parse problem: let `ask` report it properly
        return True
    return bool(ctx.params.get("prompt"))


def _guard_lower_layers() -> None:
    """Layers below term/ that print what others wrote (hub file names in download progress,
    a model file's metadata in llama.cpp's verbose log) get term's neutraliser from here."""
    from specchat.llm import hooks
    from specchat.models import progress

    def on_stderr(text: str) -> str:
        return for_stream(text, sys.stderr)

    progress.shown = hooks.shown = on_stderr


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point: one-line errors and exit codes instead of tracebacks."""
    output.open_stdin_if_closed()
    _guard_lower_layers()
    args = route_argv(sys.argv[1:] if argv is None else argv, sys.stdin.isatty())
    try:
        # Without standalone mode click returns exit codes instead of raising for some paths
        # (typer.Exit(130) after an interrupted answer, which has said so itself): pass them on.
        code = app(args=args, prog_name="specchat", standalone_mode=False)
        # A command that returns or raises 130 has already said "interrupted" (or needs not,
        # like Ctrl-C on chat's empty prompt line): a second line would only repeat it.
        output.settle()
        if isinstance(code, int) and code:
            sys.exit(code)
    except (output.OutputClosed, BrokenPipeError):
        # The reader of a pipe went away (`specchat ... | head`): not an error of ours.
        output.drop()
        sys.exit(0)
    except SpecchatError as exc:
        output.settle()
        _fail(str(exc), exc.exit_code)
    except KeyboardInterrupt:
        output.settle()
        _fail("interrupted", EXIT_INTERRUPTED)
    except (typer.Abort, typer.Exit) as exc:
        code = getattr(exc, "exit_code", 1)
        sys.exit(EXIT_INTERRUPTED if isinstance(exc, typer.Abort) else code)
    except Exception as exc:  # noqa: BLE001 - click usage errors and anything unexpected
        output.settle()
        _handle_other(exc)


def _handle_other(exc: Exception) -> None:
    # typer ships its own copy of click: recognise its usage errors by shape, not by class.
    show, code = getattr(exc, "show", None), getattr(exc, "exit_code", None)
    if callable(show) and isinstance(code, int):
        show()
        sys.exit(code)
    _fail(f"unexpected error: {type(exc).__name__}: {exc} (rerun with --verbose for details)",
          EXIT_RUNTIME)


def _fail(message: str, code: int) -> None:
    # A message may carry a file name, a server's words or a model's: shown, not obeyed.
    note(f"specchat: error: {message}")
    sys.exit(code)
