"""`python -m tests.support.serve_fake_cli serve ...`: the real CLI and server (uvicorn on
127.0.0.1) with a fake model loaded, for tests that need a server process but no real GGUF file.

SERVE_FAKE_DELAY=seconds slows every model call, so a test can act mid-answer; the model
never ends an answer by itself (only max_tokens or the context does). SERVE_FAKE_LOG=path
gets one line per model call, so a test can see whether decoding goes on.
"""

from __future__ import annotations

import os
import sys

from specchat import cli
from specchat.backend import loading
from specchat.backend.draftstore import open_store
from specchat.backend.local import Runtime
from specchat.settings.load import LoadSettings
from tests.support.fake_runtime import fake_model, fake_runtime
from tests.support.fakes import FakeModel


def open_fake(settings: LoadSettings, reuse: Runtime | None = None) -> Runtime:
    """A runtime of the fake model, with the owner's drafting store opened as
    loading.open_runtime opens it (as the settings say)."""
    base = fake_model()
    model = FakeModel(base.n_vocab, seed=0, order=2, eog=(), pieces=base.pieces,
                      n_ctx=settings.n_ctx or 100_000,
                      delay=float(os.environ.get("SERVE_FAKE_DELAY", "0")),
                      call_log=os.environ.get("SERVE_FAKE_LOG"))
    runtime = fake_runtime(model)
    runtime.store = open_store(model.n_vocab, model.eog_tokens, model.token_bytes,
                               enabled=settings.draft_history, size=settings.draft_store,
                               private=settings.private)
    return runtime


if __name__ == "__main__":
    loading.open_runtime = open_fake  # type: ignore[assignment]
    cli.main(sys.argv[1:])
