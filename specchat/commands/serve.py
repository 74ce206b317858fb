"""`specchat serve`: the same engine behind an OpenAI-compatible HTTP API."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from specchat.commands import common as c
from specchat.errors import UsageError
from specchat.settings.file import Settings
from specchat.settings.flags import with_options
from specchat.settings.load import LoadSettings
from specchat.settings.schema import GENERATION, MODEL, SERVER, STORE, group, parse_size

SERVE_OPTIONS = (*group(MODEL, GENERATION, SERVER, STORE), "api_key")


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
    load = LoadSettings.from_settings(settings)
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
                         aliases=model_aliases(model), guard=policy,
                         max_messages=settings["max_messages"],
                         strict_model=bool(settings["strict_model"]))
    if settings["host"] not in ("127.0.0.1", "localhost", "::1") and not config.api_key:
        print(f"specchat: warning: listening on {settings['host']} without --api-key: anyone "
              "who can reach this port can use the model", file=sys.stderr)
    code = run(lambda: open_runtime(load), config, host=settings["host"],
               port=settings["port"], queue_size=settings["queue"],
               verbose=bool(settings["verbose"]),
               max_connections=settings["max_connections"])
    if code:
        sys.exit(code)
