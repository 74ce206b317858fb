"""The typer app. Each command lives in specchat/commands/; this file only wires them up.

`specchat "prompt"` and `git diff | specchat "prompt"` are one-shot answers (the `ask`
command); bare `specchat` in a terminal opens the chat.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import typer

from specchat.errors import EXIT_INTERRUPTED, EXIT_RUNTIME, SpecchatError

app = typer.Typer(
    name="specchat",
    help="Chat with a local GGUF model, faster through exact speculative decoding.",
    no_args_is_help=False,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _register_commands() -> None:
    from specchat.commands import ask, bench, chat, doctor, models, serve

    for module in (ask, chat, models, bench, doctor, serve):
        module.register(app)


_register_commands()


def _command_names() -> set[str]:
    names = {c.name or c.callback.__name__ for c in app.registered_commands if c.callback}
    return names | {"--help", "-h", "--version"}


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
    ask = getattr(typer.main.get_command(app), "commands", {}).get("ask")
    try:
        ctx = ask.make_context("ask", list(args), resilient_parsing=True)
    except Exception:  # noqa: BLE001 - any parse problem: let `ask` report it properly
        return True
    return bool(ctx.params.get("prompt"))


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point: one-line errors and exit codes instead of tracebacks."""
    args = route_argv(sys.argv[1:] if argv is None else argv, sys.stdin.isatty())
    if args == ["--version"]:
        from specchat import __version__

        print(f"specchat {__version__}")
        return
    try:
        # Without standalone mode click returns exit codes instead of raising for some paths
        # (its own Ctrl-C handling returns 130): pass them on.
        code = app(args=args, prog_name="specchat", standalone_mode=False)
        if code == EXIT_INTERRUPTED:
            _fail("interrupted", EXIT_INTERRUPTED)
        if isinstance(code, int) and code:
            sys.exit(code)
    except SpecchatError as exc:
        _fail(str(exc), exc.exit_code)
    except KeyboardInterrupt:
        _fail("interrupted", EXIT_INTERRUPTED)
    except BrokenPipeError:
        # The reader of a pipe went away (`specchat ... | head`): not an error of ours.
        sys.stderr.close()
        sys.exit(0)
    except (typer.Abort, typer.Exit) as exc:
        code = getattr(exc, "exit_code", 1)
        sys.exit(EXIT_INTERRUPTED if isinstance(exc, typer.Abort) else code)
    except Exception as exc:  # click usage errors and anything unexpected
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
    print(f"specchat: error: {message}", file=sys.stderr)
    sys.exit(code)
