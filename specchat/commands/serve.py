"""`specchat serve`: the same engine behind an OpenAI-compatible HTTP API."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import typer

from specchat.backend.base import Backend
from specchat.commands import common as c
from specchat.engine.options import OptionError
from specchat.errors import UsageError
from specchat.settings.file import Settings
from specchat.settings.flags import with_options
from specchat.settings.load import LoadSettings
from specchat.settings.schema import GENERATION, MODEL, RETENTION, SERVER, group, parse_size

SERVE_OPTIONS = (*group(MODEL, GENERATION, SERVER, RETENTION), "api_key")
KEY_FILE_LIMIT = 1 << 20  # bytes of --api-key-file read at most


def register(app: typer.Typer) -> None:
    app.command("serve", help="Serve the model over an OpenAI-compatible HTTP API "
                "(/v1/chat/completions, /v1/completions, /v1/models, /health).")(serve)


@with_options(SERVE_OPTIONS)
def serve(*, settings: Settings) -> None:
    from specchat.backend.loading import open_runtime
    from specchat.models import DEFAULT_TARGET
    from specchat.serve.app import ServeConfig, model_aliases
    from specchat.serve.guard import Policy
    from specchat.serve.server import run

    if settings["parallel"] != 1:
        raise UsageError(f"--parallel {settings['parallel']}: this backend decodes one "
                         "request at a time (a llama.cpp context here holds one sequence); "
                         "use --parallel 1, and --queue N for how many may wait")
    c.options_from(settings)  # bad generation defaults fail now, not on the first request
    load, clients_root = _drafting(settings)
    defaults = {name: settings[name] for name in group(GENERATION) if name != "system"}
    model = settings["model"] or DEFAULT_TARGET
    # A file path is no name for clients to send: its file name is (the path works too).
    name = Path(model).name if model.lower().endswith(".gguf") else model
    policy = Policy(bound_host=settings["host"], allow_hosts=tuple(settings["allow_host"]),
                    cors_origins=tuple(settings["cors_origin"]),
                    max_body=parse_size(settings["max_body"]),
                    read_timeout=settings["read_timeout"])
    config = ServeConfig(model=name, defaults=defaults, system=settings["system"],
                         api_key=settings["api_key"],
                         more_keys=_key_file(settings["api_key_file"]),
                         aliases=model_aliases(model), guard=policy,
                         max_messages=settings["max_messages"],
                         strict_model=bool(settings["strict_model"]))
    if settings["host"] not in ("127.0.0.1", "localhost", "::1") and not config.keys:
        print(f"specchat: warning: listening on {settings['host']} without --api-key: anyone "
              "who can reach this port can use the model", file=sys.stderr)

    def opened() -> Backend:
        runtime = open_runtime(load)
        runtime.keep_clients_apart(clients_root, settings["draft_store"])
        return runtime

    code = run(opened, config, host=settings["host"],
               port=settings["port"], queue_size=settings["queue"],
               verbose=bool(settings["verbose"]),
               max_connections=settings["max_connections"])
    if code:
        sys.exit(code)


def _drafting(settings: Settings) -> tuple[LoadSettings, Path | None]:
    """How the models load, and where each client's own drafting store lives (None: no
    store at all). The owner's store (what ask and chat keep) is opened only with
    --draft-from-chats, and read only; --private keeps nothing and reads nothing."""
    from specchat.paths import serve_store_dir

    private, from_store = bool(settings["private"]), bool(settings["draft_history"])
    chats = bool(settings["draft_from_chats"])
    if chats and private:
        raise UsageError("--draft-from-chats reads your chats' drafting store and --private "
                         "says nothing is read or written: use one of them")
    load = dataclasses.replace(LoadSettings.from_settings(settings),
                               draft_history=chats and from_store, private=True)
    kept = from_store and not private and parse_size(settings["draft_store"]) > 0
    return load, serve_store_dir() if kept else None


def _key_file(name: str | None) -> tuple[str, ...]:
    """The API keys in --api-key-file, one a line (blank lines and # comments skipped);
    a key is never shown in an error, not even a wrong one."""
    from specchat.fileio import FileIOError
    from specchat.fileread import read_limited
    from specchat.settings.schema import BY_NAME

    if name is None:
        return ()
    try:
        text = read_limited(Path(name).expanduser(), KEY_FILE_LIMIT).decode("utf-8")
    except FileNotFoundError:
        raise UsageError(f"--api-key-file {name}: no such file") from None
    except (FileIOError, UnicodeDecodeError) as exc:
        raise UsageError(f"--api-key-file {name}: cannot be read as text ({exc})") from None
    keys = []
    for number, line in enumerate(text.splitlines(), 1):
        key = line.strip()
        if not key or key.startswith("#"):
            continue
        try:
            keys.append(BY_NAME["api_key"].validate(key))
        except OptionError as exc:
            raise UsageError(f"--api-key-file {name} line {number}: an API key "
                             f"{str(exc).removeprefix('api_key ')}") from None
    if not keys:
        raise UsageError(f"--api-key-file {name} holds no key: write one key a line")
    return tuple(keys)
