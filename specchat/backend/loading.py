"""Opening local models: resolve (pulling on first use), load, check, and measure what `auto`
and the thread governor decide with. The result is a local.Runtime.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from specchat.backend.base import RuntimeInfo
from specchat.backend.calibration import STEADY_SHARE, QuietSteps
from specchat.backend.cpushare import CpuShare
from specchat.backend.draftstore import open_store
from specchat.backend.flashattn import choice
from specchat.backend.gpu import gpu_key, gpu_layers
from specchat.backend.local import Runtime
from specchat.backend.structured import ModelGuides
from specchat.backend.tuning import (
    Calibration,
    Tuned,
    flash_attn_for,
    machine_quiet,
    measured_auto_state,
    plain_step_reference,
    thread_governor,
    unpaying_draft,
    wants_auto_costs,
)
from specchat.engine.options import Spec
from specchat.engine.textdraft import TextVocabs
from specchat.errors import SpecchatError
from specchat.llm.template import ChatTemplate, chat_tokens
from specchat.llm.vocab import (
    VocabPrint,
    check_compatible,
    compatibility_problems,
    prints_compatible,
)
from specchat.models import DEFAULT_TARGET, default_draft_for, resolve_model
from specchat.models.headers import Headers
from specchat.models.pairing import FoundDraft, find_draft
from specchat.settings.load import LoadSettings
from specchat.term.safe import note

if TYPE_CHECKING:
    from specchat.llm.model import LlamaModel


def wants_draft(settings: LoadSettings) -> str | None:
    """Which draft to load: the one asked for, else the target preset's default, for the
    modes that draft with a model; None for none."""
    if not settings.spec.uses_draft_model or settings.no_draft:
        return None
    return settings.draft or default_draft_for(settings.model or DEFAULT_TARGET)


def found_draft(settings: LoadSettings, target_path: Path) -> FoundDraft | None:
    """A draft looked for among the models on this machine (models/pairing.py), when the
    mode drafts with a model and neither -d, --draft none nor the target's preset names one.
    A search that fails costs only the draft. None when there is none."""
    if not settings.spec.uses_draft_model or wants_draft(settings) is not None \
            or settings.no_draft:
        return None
    try:
        found = find_draft(target_path)
    except (SpecchatError, OSError):
        return None
    return found if found.model is not None else None


def _say_found(found: FoundDraft) -> None:
    """The note for a draft found on this machine that is loaded."""
    assert found.model is not None
    smaller = found.target_size / max(found.model.size, 1)
    note(f"specchat: draft {found.model.name} found on this machine (same vocabulary, "
         f"{smaller:.0f}x smaller; --draft none turns it off)")


def open_runtime(settings: LoadSettings, reuse: Runtime | None = None) -> Runtime:
    """Resolve, load and check the target and draft models.

    A model file that `reuse` already has loaded (same path) is taken from it instead of
    being loaded again; Runtime.switch() settles who closes it.
    """
    target_name = settings.model or DEFAULT_TARGET
    draft_name = wants_draft(settings)
    target_path = resolve_model(target_name, quiet=settings.quiet)
    draft_path = resolve_model(draft_name, quiet=settings.quiet) if draft_name else None
    found = found_draft(settings, target_path)
    if found is not None and found.model is not None:
        draft_name, draft_path = found.model.name, found.model.path
    layers, fit = gpu_layers(settings, target_path, draft_path)
    calibration = Calibration(settings, gpu_key(layers, fit))
    paired = draft_path  # learnt acceptance stays the pair's (Calibration.acceptance_key)
    unloaded = _left_out(settings, calibration, target_path, draft_name, draft_path, layers[0])
    if unloaded is not None:
        if settings.draft and not settings.quiet:  # named by the user: say why it is idle
            note(f"specchat: {unloaded}")
        draft_name, draft_path = None, None
    elif found is not None and not settings.quiet:
        _say_found(found)
    closers: list[Callable[[], None]] = []
    target, draft, template, vocabs = _load(settings, (target_path, draft_path), layers,
                                            calibration, _loaded_models(reuse), closers)
    info = RuntimeInfo(
        target_name=target_name, target_path=str(target_path),
        draft_name=draft_name, draft_path=str(draft_path) if draft_path else None,
        draft_found=found is not None and unloaded is None, draft_not_loaded=unloaded,
        template_note=template.note, template_is_fallback=template.is_fallback,
        gpu=fit.summary() if fit is not None else "", gpu_layers=gpu_key(layers, fit),
    )
    if template.is_fallback and not settings.quiet:
        note(f"specchat: note: {template.note}")
    if vocabs is not None:
        info.draft_text = True
        info.notes.append(f"{draft_name} has another vocabulary than {target_name}: it "
                          "drafts text, re-tokenized for the target")
    runtime = Runtime(
        target=target, draft=draft,
        chat_tokens=lambda messages: chat_tokens(target, template, list(messages)),
        # --raw sends the text verbatim, control tokens included: it is how to write a
        # prompt in the model's own format (documented in `ask --raw --help` and README).
        raw_tokens=lambda text: target.tokenize(text, add_special=True, parse_special=True),
        least_tokens=lambda prompt: target.fewest_tokens(
            prompt if isinstance(prompt, str) else template.render(list(prompt))),
        info=info, speculation_allowed=not target.is_recurrent, closers=closers,
        settings=settings, reopen=open_runtime, guides=ModelGuides(target, template),
        vocabs=vocabs,
    )
    tuned = Tuned(target, draft, target_path, paired, settings, calibration)
    try:
        runtime.store = open_store(target.n_vocab, target.eog_tokens, target.token_bytes,
                                   enabled=settings.draft_history, size=settings.draft_store,
                                   private=settings.private)
        _tune(runtime, tuned)
    except BaseException:
        runtime.close()  # only what was loaded here: reused models stay with their owner
        raise
    return runtime


def _left_out(settings: LoadSettings, calibration: Calibration, target_path: Path,
              draft_name: str | None, draft_path: Path | None, target_layers: int
              ) -> str | None:
    """Why the draft is not loaded (draft_not_worth_loading), or None. Left out, it leaves
    the layers, and so the calibration keys, as they were chosen with it in mind."""
    ratio = draft_not_worth_loading(settings, calibration, target_path, draft_path,
                                    target_layers)
    if ratio is None:
        return None
    return (f"draft {draft_name} not loaded: its step costs {ratio:.2f} of a target step here, "
            "more than auto could ever win back (--spec draft, or /mode draft in a chat, "
            "loads it)")


def draft_not_worth_loading(settings: LoadSettings, calibration: Calibration,
                            target_path: Path, draft_path: Path | None, target_layers: int
                            ) -> float | None:
    """The draft step in target steps, when a command that loads the draft on demand need
    not load it now: it answers in auto, and the finished calibration shows auto could never
    draft with it (~1 s and its memory a start on this 2-core CPU, where the 0.5B draft costs
    half the 1.5B target's step). None: load it."""
    if not settings.draft_on_demand or settings.spec is not Spec.AUTO or draft_path is None:
        return None
    from specchat.llm import runs_on_cpu

    flash_attn = flash_attn_for(settings, calibration, target_path, runs_on_cpu(target_layers))
    return unpaying_draft(calibration, target_path, draft_path, flash_attn, settings.exact)


def _load(settings: LoadSettings, paths: tuple[Path, Path | None], layers: tuple[int, int],
          calibration: Calibration, loaded: dict[str, LlamaModel],
          closers: list[Callable[[], None]]
          ) -> tuple[LlamaModel, LlamaModel | None, ChatTemplate, TextVocabs | None]:
    """The target and draft (taken from `loaded` where the file is already open), the
    target's chat template, and both vocabularies as text when the draft's differs
    (text_vocabs). What is loaded here is closed by `closers`, also when this fails."""
    from specchat.llm import runs_on_cpu
    from specchat.llm.model import load_model  # llama.cpp loads only when models do

    headers = Headers()

    def load(path: Path, n_ctx: tuple[int, int | None], n_gpu_layers: int,
             flash_attn: bool | None = None, exact: bool = False) -> LlamaModel:
        if str(path) in loaded:
            return loaded[str(path)]
        model = load_model(path, n_ctx=n_ctx[0], ctx_start=n_ctx[1],
                           n_gpu_layers=n_gpu_layers, n_threads=settings.threads,
                           verbose=settings.verbose, flash_attn=flash_attn, exact=exact,
                           repack=settings.repack)
        closers.append(model.close)
        _known_eog(model, headers)
        return model

    target_path, draft_path = paths
    # Only the target's numerics decide the answer: the draft is never made exact.
    target = load(target_path, (settings.n_ctx, settings.ctx_start), layers[0],
                  flash_attn_for(settings, calibration, target_path, runs_on_cpu(layers[0])),
                  settings.exact)
    try:
        draft, vocabs = None, None
        if draft_path is not None:
            # The target's sizes, not settings.n_ctx: --ctx 0 resolved to its trained one.
            # A pinned flash attention applies to both models; under auto the draft takes
            # auto's default for where it runs, not the target's measurement (its numerics
            # never change the answer).
            draft = load(draft_path, (target.n_ctx, target.allocated), layers[1],
                         choice(settings.flash_attn, None, on_cpu=runs_on_cpu(layers[1]),
                                exact=False))
            vocabs = text_vocabs(settings, target, draft, headers)
        headers.save()  # best effort: a memo not kept is only a slower next start
        return target, draft, ChatTemplate.from_model(target), vocabs
    except BaseException:
        for close in reversed(closers):
            close()
        raise


def text_vocabs(settings: LoadSettings, target: LlamaModel, draft: LlamaModel,
                headers: Headers | None = None) -> TextVocabs | None:
    """None when the draft shares the target's vocabulary. A draft named with --draft that
    does not drafts text, re-tokenized for the target (engine/textdraft.py): exact, if
    slower than a draft of the same vocabulary. Any other draft must share it.

    Reading both vocabularies costs ~0.3 s a start (a tenth of a short `ask`), so two files
    whose prints the headers memo keeps (models/headers.py) are judged by their prints, and
    a pair found to share a vocabulary leaves its prints there for the next start."""
    from specchat.llm.files import summary_of
    from specchat.llm.textvocab import LlamaTextVocab

    headers = headers or Headers()
    known, other = (_remembered_print(headers, m.path) for m in (target, draft))
    if known is not None and other is not None and prints_compatible(known, other):
        return None
    target_info, draft_info = target.vocab_info(), draft.vocab_info()
    if not compatibility_problems(target_info, draft_info):
        with contextlib.suppress(OSError):  # a memo not kept is only a slower next start
            for model, info in ((target, target_info), (draft, draft_info)):
                headers.remember(model.path.resolve(), summary_of(model.metadata, info))
            headers.save()
        return None
    if not settings.draft:
        check_compatible(target_info, draft_info)  # refused, naming every difference
    return TextVocabs(LlamaTextVocab(target), LlamaTextVocab(draft))


def _known_eog(model: LlamaModel, headers: Headers) -> None:
    """The model's end-of-generation ids from the headers memo, or found now (asking
    llama.cpp about every id: ~45 ms for 150k) and left there for the next start."""
    with contextlib.suppress(OSError):  # a file gone from under us: found the slow way
        path = model.path.resolve()
        known = headers.eog(path, model.n_vocab)
        if known is not None:
            model.know_eog_tokens(known)
        else:
            headers.remember_eog(path, model.eog_tokens)


def _remembered_print(headers: Headers, path: Path) -> VocabPrint | None:
    try:
        summary = headers.summary(path.resolve(), read=False)
    except (OSError, SpecchatError):  # gone, or remembered as unreadable: read it now
        return None
    return None if summary is None else summary.vocab


def _tune(runtime: Runtime, tuned: Tuned) -> None:
    """What `auto` decides with, and the thread governor (both measured once, cached)."""
    runtime.tuned = tuned
    auto = None
    if wants_auto_costs(tuned.settings, runtime.speculation_allowed):
        steps = QuietSteps(machine_quiet(tuned.settings, STEADY_SHARE))
        runtime.steps_heard = steps  # only `auto`'s prices are kept from a run
        runtime.auto, closers = measured_auto_state(tuned, steady=steps.steady)
        runtime.closers[:0] = closers  # run before the models close
        auto = runtime.auto
    share = CpuShare()

    def reference() -> tuple[float, bool]:
        if not runtime.speculation_allowed:
            return float("inf"), True  # a recurrent cache cannot be measured and put back
        return plain_step_reference(tuned, auto)

    runtime.governor = thread_governor(tuned, reference, share)
    runtime.cpu_share = share if runtime.governor is not None else None


def _loaded_models(runtime: Runtime | None) -> dict[str, LlamaModel]:
    if runtime is None or runtime.tuned is None:
        return {}
    tuned = runtime.tuned
    pairs = [(str(tuned.target_path), tuned.target), (str(tuned.draft_path), tuned.draft)]
    return {path: model for path, model in pairs if model is not None}
