"""/model on real models: SmolLM2-135M -> Gemma-3-270M -> SmolLM2, the conversation kept and
re-read by each new target, a model that fails to load leaving the old one in place."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from specchat.chat.chatlog import ChatLog
from specchat.engine.events import Finished
from specchat.engine.options import GenerationOptions, SamplingOptions
from tests.support import chat_fakes as f
from tests.support.replkeys import CTRL_D, ENTER, drive

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
pytestmark = pytest.mark.real


def test_model_switch_keeps_the_conversation(real_model_path: Callable[[str], Path],
                                             tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from specchat.backend.loading import open_runtime
    from specchat.chat.render import RenderConfig, Renderer
    from specchat.chat.session import ChatSession
    from specchat.settings.load import LoadSettings

    smol, gemma = real_model_path("smollm2-135m"), real_model_path("gemma3-270m")
    monkeypatch.setenv("SPECCHAT_CACHE", str(smol.parent))
    settings = LoadSettings(model="smollm2-135m", spec="off", n_ctx=1024, threads=2,
                            quiet=True)
    options = GenerationOptions(sampling=SamplingOptions(), max_tokens=12, spec="off")
    streams = f.Streams()
    config = RenderConfig(rich=False, markdown=False, show_draft=False, summary=False)
    runtime = open_runtime(settings)
    session = ChatSession(runtime=runtime, options=options,
                          renderer=Renderer(config, streams.out, streams.err),
                          chatlog=ChatLog(tmp_path / "c.jsonl"))
    keys = ("Name a colour." + ENTER + f"/model {tmp_path / 'missing.gguf'}" + ENTER
            + "/model gemma3-270m" + ENTER + "And another one?" + ENTER
            + "/model smollm2-135m" + ENTER + "One more." + ENTER + CTRL_D)
    try:
        assert drive(session, keys, None) == 0
        _, err = streams.take()
        assert "still using smollm2-135m" in err and "now gemma3-270m" in err
        turns = session.conversation.turns
        assert [t.user for t in turns] == ["Name a colour.", "And another one?", "One more."]
        assert session.runtime.info.target_path == str(smol)
        # Each answer after a switch is what that model says to the whole conversation so far
        # when loaded fresh: the history was re-read by the new target, nothing carried over.
        for index, path in ((1, gemma), (2, smol)):
            fresh = open_runtime(LoadSettings(model=str(path), spec="off", n_ctx=1024,
                                              threads=2, quiet=True))
            with fresh:
                messages = session.conversation.messages(start=0)[: 2 * index + 1]
                events = list(fresh.stream(fresh.chat_tokens(messages), options))
            finished = events[-1]
            assert isinstance(finished, Finished)
            assert turns[index].assistant == finished.text
    finally:
        session.runtime.close()
