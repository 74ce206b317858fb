"""How to find and load the models: the load-time options of the schema, as one value.

Built from resolved settings (flags, environment, config file); every default is read from the
schema, so each is written once (specchat/settings/schema.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from specchat.engine.options import Spec
from specchat.settings.file import Settings
from specchat.settings.schema import BY_NAME, NO_DRAFT


@dataclass(frozen=True)
class LoadSettings:
    """Which models, and how: what open_runtime needs besides the answer options."""

    # Every default is the schema's. model None: the default target preset; draft None: the
    # target preset's own draft, NO_DRAFT: none; ctx 0: the target's trained context;
    # n_gpu_layers None: what fits, -1: every layer; threads None: what the machine has.
    model: str | None = field(default=BY_NAME["model"].default)
    draft: str | None = field(default=BY_NAME["draft"].default)
    spec: Spec = field(default=Spec(BY_NAME["spec"].default))  # decides whether a draft loads
    n_ctx: int = field(default=BY_NAME["ctx"].default)
    n_gpu_layers: int | None = field(default=BY_NAME["n_gpu_layers"].default)
    threads: int | None = field(default=BY_NAME["threads"].default)
    verbose: bool = field(default=BY_NAME["verbose"].default)
    # "auto": off on the CPU, else llama.cpp's default, unless a confirmed measurement says
    # otherwise; "on"/"off" pin it (backend/flashattn.py decides what auto means).
    flash_attn: str = field(default=BY_NAME["flash_attn"].default)
    exact: bool = field(default=BY_NAME["exact"].default)  # llm/exact.py
    # Weights repacked at load for the CPU's fastest decoding kernels (llama.cpp's default).
    repack: bool = field(default=BY_NAME["repack"].default)
    quiet: bool = False  # no notes on stderr (one-shot answers to a pipe, JSON output)
    # The drafting store (backend/draftstore.py): read and written, its size, and whether
    # this session may write anything of what is asked or answered.
    draft_history: bool = field(default=BY_NAME["draft_history"].default)
    draft_store: str = field(default=BY_NAME["draft_store"].default)
    private: bool = field(default=BY_NAME["private"].default)
    # Under auto, a draft model this machine's calibration shows auto could never draft with
    # is not loaded: ask answers in auto alone, and chat loads it when /mode draft asks.
    draft_on_demand: bool = False
    # Positions the contexts start with (None: n_ctx), widened up to n_ctx by
    # Runtime.make_room: a one-shot answer knows roughly what it needs before loading.
    ctx_start: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "spec", Spec(self.spec))  # "off" given as text is Spec.OFF

    @classmethod
    def from_settings(cls, settings: Settings, *, quiet: bool = False) -> LoadSettings:
        """The load options among `settings` (those a command does not take: defaults)."""
        def get(name: str) -> Any:
            return settings.get(name, BY_NAME[name].default)

        return cls(model=get("model"), draft=get("draft"), spec=Spec(get("spec")),
                   n_ctx=get("ctx"), n_gpu_layers=get("n_gpu_layers"), threads=get("threads"),
                   verbose=bool(get("verbose")), flash_attn=get("flash_attn"),
                   exact=bool(get("exact")), repack=bool(get("repack")), quiet=quiet,
                   draft_history=bool(get("draft_history")), draft_store=get("draft_store"),
                   private=bool(get("private")))

    @property
    def no_draft(self) -> bool:
        """The user asked for no draft model at all."""
        return self.draft == NO_DRAFT
