"""Every user-settable option, declared once.

Each Option says its name (the config-file key and the `/set` name), type, default, help,
validation and environment variable. The command-line flags of every command (flags.py), the
config file and its profiles (file.py), the load settings (load.py), `specchat config`, `/set`
and `/show` in the chat, `bench` and the HTTP server's request defaults are all read from
OPTIONS.

Precedence, highest first: flag > environment variable > profile > config file > default.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from specchat.engine.options import (
    SPEC_MODES,
    GenerationOptions,
    OptionError,
    SamplingOptions,
)
from specchat.errors import UsageError
from specchat.settings.structure import FORMATS, structure_from_options

Parser = Callable[[str], Any]
Checker = Callable[[Any], str | None]  # None when fine, else what is allowed

MODEL, GENERATION, CHAT, REMOTE, SERVER, ASK = ("model", "generation", "chat", "remote", "server",
                                             "ask")
RETENTION = "retention"  # what is kept of the questions and answers (ask, chat and serve)
_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\"}
NO_DRAFT = "none"  # the draft option's value for "no draft model" (None: the preset's default)
FLASH_ATTN_CHOICES = ("auto", "on", "off")
_SIZE_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
MAX_ECHO = 200  # a wrong value longer than this (as Python writes it) is not echoed back


@dataclass(frozen=True)
class Option:
    name: str  # snake_case: config key, /set name, --kebab-case flag
    kind: type  # int, float, str, bool or list (of str)
    default: Any
    help: str
    group: str
    short: str | None = None  # e.g. "-n"
    optional: bool = False  # None is a value (typed as none_text, "null", "-" or "")
    none_text: str = "none"  # how None is typed and shown ("auto" for GPU layers)
    choices: tuple[str, ...] = ()
    check: Checker | None = None
    parse: Parser | None = None  # text -> value where plain kind(text) is not enough
    live: bool = False  # can change mid-chat with /set
    secret: bool = False  # never printed in full
    metavar: str | None = None
    complete: Callable[[str], list[str]] | None = None  # shell completion of the value

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return "SPECCHAT_" + self.name.upper()

    def from_text(self, raw: str) -> Any:
        """A value from text (env var, /set, a config string); OptionError names what fits."""
        text = raw.strip()
        if self.optional and text.lower() in (self.none_text, "null", "-", ""):
            return self.validate(None)
        if self.parse is not None:
            return self.validate(self.parse(text))
        if self.kind is bool:
            return self.validate(_parse_bool(self.name, text))
        if self.kind is list:
            return self.validate(_parse_list(text))
        if self.kind in (int, float):
            try:
                value = self.kind(text)
            except ValueError:
                raise OptionError(f"{self.name} needs "
                                  f"{'an integer' if self.kind is int else 'a number'}, "
                                  f"not {raw!r}") from None
            return self.validate(value)
        return self.validate(raw if self.kind is str else text)

    def accept(self, value: Any) -> Any:
        """A value as it arrives from anywhere (a flag, a TOML file, /set): text where the
        option is not text is parsed, anything else type- and range-checked."""
        return self.from_text(value) if isinstance(value, str) and self.kind is not str \
            else self.validate(value)

    def validate(self, value: Any) -> Any:
        """The value, type-checked (ints accepted as floats) and range-checked."""
        if value is None:
            if self.optional:
                return None
            raise OptionError(f"{self.name} needs a value")
        if self.parse is not None and isinstance(value, str):
            value = self.parse(value)  # "auto", "random", "2G": the option's own text forms
        if self.kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if self.kind is list:
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
                raise OptionError(f"{self.name} needs a list of strings")
            value = list(value)
        elif self.parse is None and (not isinstance(value, self.kind) or (
                self.kind is not bool and isinstance(value, bool))):
            raise OptionError(f"{self.name} needs {_kind_name(self.kind)}, not {value!r}")
        if self.choices and value not in self.choices:
            raise OptionError(f"{self.name} must be one of {', '.join(self.choices)}, "
                              f"not {value!r}")
        problem = self.check(value) if self.check else None
        if problem:  # a secret is never echoed, not even a wrong one, nor a huge value
            shown = "" if self.secret else repr(value)
            raise OptionError(f"{self.name} {problem}" + (f", not {shown}" if shown and
                                                         len(shown) <= MAX_ECHO else ""))
        return value

    def show(self, value: Any) -> str:
        """The value as the user would type it (in /show, `specchat config`)."""
        if value is None:
            return self.none_text
        if self.secret:
            return "***"
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, list):
            return json.dumps(value, ensure_ascii=False)
        if isinstance(value, str):
            return json.dumps(value, ensure_ascii=False) if value != value.strip() or \
                "\n" in value or not value else value
        return str(value)


def _kind_name(kind: type) -> str:
    return {int: "an integer", float: "a number", bool: "true or false",
            str: "a string", list: "a list of strings"}[kind]


def _parse_bool(name: str, text: str) -> bool:
    low = text.lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise OptionError(f"{name} needs true or false, not {text!r}")


def _parse_list(text: str) -> list[str]:
    """Stop strings: a JSON list, or one string where \\n, \\t and \\\\ are escapes."""
    if text.startswith("["):
        try:
            items = json.loads(text)
        except ValueError:
            raise OptionError('give a JSON list like ["\\n\\n", "END"]') from None
        if not isinstance(items, list):
            raise OptionError('give a JSON list like ["\\n\\n", "END"]')
        return [str(s) for s in items]
    return [re.sub(r"\\([nt\\])", lambda m: _ESCAPES[m.group(1)], text)]


def _parse_gpu_layers(text: str) -> int | None:
    if text.lower() == "auto":
        return None
    try:
        return int(text)
    except ValueError:
        raise OptionError(f"n_gpu_layers needs auto or an integer, not {text!r}") from None


def _parse_seed(text: str) -> int | None:
    if text.lower() in ("random", "none"):
        return None
    try:
        return int(text)
    except ValueError:
        raise OptionError(f"seed needs an integer (-1: random), not {text!r}") from None


def _complete_models(incomplete: str) -> list[str]:
    from specchat.models.complete import model_candidates  # only when a shell asks

    return model_candidates(incomplete)


def _complete_drafts(incomplete: str) -> list[str]:
    return [c for c in ["none", *_complete_models(incomplete)] if c.startswith(incomplete)]


def parse_size(text: str) -> int:
    """Bytes from a size like '2G', '500M', '0' or 'off' (off and 0: nothing)."""
    raw = text.strip()
    if raw.lower() in ("off", "no", "false"):
        return 0
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?", raw, re.IGNORECASE)
    if match is None:
        raise OptionError(f"needs a size like 2G or 500M (0 or off: none), not {text!r}")
    return int(float(match.group(1)) * _SIZE_UNITS[match.group(2).upper()])


def _size_text(name: str) -> Parser:
    """A size option keeps its text ('2G'); parse_size turns it into bytes where used."""
    def parse(text: str) -> str:
        try:
            parse_size(text)
        except OptionError as exc:
            raise OptionError(f"{name} {exc}") from None
        return text
    return parse


def _api_key_check(value: str) -> str | None:
    # An HTTP header carries it: printable ASCII, no spaces. An empty key (an unset shell
    # variable) would otherwise mean "no key" here and "an empty key" to the server.
    if value and value.isascii() and value.isprintable() and " " not in value:
        return None
    return "must be printable ASCII without spaces (it travels in an HTTP header), not empty"


def _parse_draft(text: str) -> str | None:
    """'none' (any case) is NO_DRAFT, 'default' the target preset's own draft (None)."""
    low = text.strip().lower()
    if low == NO_DRAFT:
        return NO_DRAFT
    return None if low in ("default", "") else text


def _positive(value: float) -> str | None:
    return None if 0 < value < math.inf else "must be a positive number"


def _at_least(low: float, what: str = "") -> Checker:
    return lambda v: None if v >= low else f"must be >= {low:g}{what}"


def _sampling_check(field: str) -> Checker:
    """Range checks of the engine's own SamplingOptions, so they live in one place."""
    def check(value: Any) -> str | None:
        try:
            SamplingOptions(**{field: value})
        except OptionError as exc:
            return str(exc).removeprefix(field).strip()
        return None
    return check


def _generation_check(field: str) -> Checker:
    def check(value: Any) -> str | None:
        try:
            values: dict[str, Any] = {field: tuple(value) if field == "stop" else value}
            GenerationOptions(**values)
        except OptionError as exc:
            return str(exc).removeprefix(field).strip()
        return None
    return check


_G = GenerationOptions()
_S = _G.sampling

OPTIONS: tuple[Option, ...] = (
    # --- which models, and how they are loaded -------------------------------------------
    Option("model", str, None, "Target model: preset name, .gguf path, or Hugging Face "
           "user/repo[:QUANT].", MODEL, short="-m", optional=True, metavar="MODEL",
           complete=_complete_models),
    Option("draft", str, None, "Draft model (like --model); 'none' for no draft model.",
           MODEL, short="-d", optional=True,
           none_text="default", parse=_parse_draft, metavar="MODEL",
           complete=_complete_drafts),
    Option("ctx", int, 4096, "Context size in tokens (0: the model's trained context).",
           MODEL, check=lambda v: None if v == 0 or v >= 16 else "must be 0 or >= 16"),
    Option("n_gpu_layers", int, None, "Layers to offload to the GPU: auto (as many as fit) "
           "or a number.", MODEL, optional=True, none_text="auto", parse=_parse_gpu_layers,
           check=lambda v: None if v is None or isinstance(v, int) else "needs auto or an "
           "integer", metavar="auto|N"),
    Option("threads", int, None, "CPU threads (default: what this machine has).", MODEL,
           optional=True, check=_at_least(1)),
    Option("verbose", bool, False, "Show llama.cpp's own log and error details.", MODEL,
           short="-v"),
    Option("flash_attn", str, "auto", "Flash attention: auto (off where every layer runs "
           "on the CPU, on with --exact, llama.cpp's default with layers on a GPU; a large "
           "difference `specchat bench --calibrate` confirmed on a quiet machine wins), on, "
           "off. Greedy answers can differ between the two at near-ties.", MODEL,
           choices=FLASH_ATTN_CHOICES),
    Option("repack", bool, True, "Repack the weights at load into the layout llama.cpp's CPU "
           "kernels decode fastest (its default). --no-repack: the load takes about a second "
           "less and a long prompt is read faster, but every token is written slower "
           "(docs/performance.md): worth it for a long input with a short answer. Greedy "
           "answers can differ between the two at near-ties.", MODEL),
    Option("exact", bool, False, "Greedy answers equal --spec off's token for token where the "
           "target runs on the CPU: flash attention on, V cache in bf16, and at temperature 0 "
           "at most 2 drafted tokens verified at a time (docs/exactness.md). Off (the "
           "default): drafts are longer and greedy answers equal off's except where two "
           "tokens tie within batched-vs-single float noise.", MODEL),
    # --- what an answer may do --------------------------------------------------------------
    Option("spec", str, _G.spec, "Speculation: auto (drafts only when it pays), draft, "
           "ngram, off.", GENERATION, choices=SPEC_MODES, live=True),
    Option("draft_max", int, _G.draft_max, "Most tokens drafted per step.", GENERATION,
           check=_generation_check("draft_max"), live=True),
    Option("temperature", float, _S.temperature, "0 is greedy.", GENERATION, short="-t",
           check=_sampling_check("temperature"), live=True),
    Option("top_k", int, _S.top_k, "0 turns it off.", GENERATION,
           check=_sampling_check("top_k"), live=True),
    Option("top_p", float, _S.top_p, "1 turns it off.", GENERATION,
           check=_sampling_check("top_p"), live=True),
    Option("min_p", float, _S.min_p, "0 turns it off.", GENERATION,
           check=_sampling_check("min_p"), live=True),
    Option("repeat_penalty", float, _S.repeat_penalty, "1 turns it off.", GENERATION,
           check=_sampling_check("repeat_penalty"), live=True),
    Option("repeat_last_n", int, _S.repeat_last_n, "Window of recent tokens the repeat "
           "penalty sees.", GENERATION, check=_sampling_check("repeat_last_n"), live=True),
    Option("seed", int, None, "Seed for reproducible sampling (-1 or none: random).",
           GENERATION, optional=True, parse=_parse_seed, metavar="N",
           check=_sampling_check("seed"), live=True),
    Option("max_tokens", int, _G.max_tokens, "Most tokens in an answer.", GENERATION,
           short="-n", check=_generation_check("max_tokens"), live=True),
    Option("stop", list, [], "Stop string (repeatable); never printed.", GENERATION,
           check=_generation_check("stop"), live=True),
    Option("system", str, None, "System prompt.", GENERATION, short="-s", optional=True,
           live=True),
    Option("format", str, "text", "Answer format: text, or json (the answer is one JSON "
           "object, enforced by a grammar).", GENERATION, choices=FORMATS, live=True),
    Option("schema", str, None, "A JSON schema the answer must match (a file, or the schema "
           "itself as JSON); implies --format json.", GENERATION, optional=True, live=True,
           metavar="FILE|JSON"),
    # --- the terminal chat ----------------------------------------------------------------------
    Option("plain", bool, False, "No Markdown rendering of answers.", CHAT, live=True),
    Option("show_draft", bool, False, "Colour the tokens that came from the draft.", CHAT,
           live=True),
    # --- one-shot answers -----------------------------------------------------------------------
    Option("prompt_cache", str, "2G", "Disk the prompt cache of one-shot answers may use "
           "(e.g. 2G, 500M; 0 or off: no cache).", ASK, parse=_size_text("prompt_cache"),
           metavar="SIZE"),
    # --- what is kept of questions and answers ------------------------------------------------
    Option("draft_history", bool, True, "Let `auto` draft from earlier prompts and answers "
           "kept on this machine (the drafting store); false: it is neither read nor "
           "written.", RETENTION),
    Option("draft_store", str, "64M", "Disk the drafting store may use per vocabulary, "
           "oldest answers evicted first (e.g. 64M; 0 or off: nothing kept).", RETENTION,
           parse=_size_text("draft_store"), metavar="SIZE"),
    Option("private", bool, False, "Write nothing of what is asked or answered: no "
           "conversation file, input history, prompt cache or drafting store.", RETENTION),
    # --- another server instead of local models ----------------------------------------------
    Option("endpoint", str, None, "Use an OpenAI-compatible server at this URL instead of "
           "local models.", REMOTE, optional=True, metavar="URL"),
    Option("api_key", str, None, "API key: sent to --endpoint; required by `serve` when set.",
           REMOTE, optional=True, secret=True, metavar="KEY", check=_api_key_check),
    Option("timeout", float, 120.0, "Seconds --endpoint may stay silent: to connect (at most "
           "10 of them) and between two parts of an answer.", REMOTE, check=_positive,
           metavar="SECONDS"),
    # --- specchat serve -------------------------------------------------------------------------
    Option("host", str, "127.0.0.1", "Address to listen on.", SERVER),
    Option("port", int, 8080, "Port to listen on.", SERVER,
           check=lambda v: None if 0 <= v <= 65535 else "must be in [0, 65535]"),
    Option("parallel", int, 1, "Requests decoded at once: 1 on this backend (one llama.cpp "
           "sequence per context); more wait in the queue.", SERVER, check=_at_least(1)),
    Option("queue", int, 16, "Requests waiting beyond those; more get 429.", SERVER,
           check=_at_least(0)),
    Option("allow_host", list, [], "A host name clients may use besides IP addresses, "
           "localhost and --host (repeatable; .example.com: its subdomains; *: any). A guard "
           "against DNS rebinding.", SERVER, metavar="NAME"),
    Option("cors_origin", list, [], "A web page origin that may call the API from a browser, "
           "e.g. http://localhost:3000 (repeatable; *: any). None by default.", SERVER,
           metavar="ORIGIN"),
    Option("max_body", str, "8M", "Largest request body; larger ones get 413.", SERVER,
           parse=_size_text("max_body"), metavar="SIZE",
           check=lambda v: None if parse_size(v) >= 1024 else "must be at least 1K"),
    Option("api_key_file", str, None, "A file of API keys `serve` accepts besides --api-key, "
           "one a line; each key's requests draft from a drafting store of their own.",
           SERVER, optional=True, metavar="FILE"),
    Option("draft_from_chats", bool, False, "Let `serve` draft its answers from your own "
           "chats' drafting store too (read only: clients' words never go into it). Off: "
           "each API key drafts only from what it asked before. Only for a server you "
           "alone use.", SERVER),
    Option("strict_model", bool, False, "Answer only requests that name the served model "
           "(its name, file name or path); others get 404. By default any name is this "
           "model.", SERVER),
    Option("max_messages", int, 4096, "Most messages in one chat request.", SERVER,
           check=_at_least(1)),
    Option("max_connections", int, 64, "Most open connections (kept below ulimit -n); more "
           "are refused at once.", SERVER, check=_at_least(1)),
    Option("read_timeout", float, 20.0, "Seconds a client may take to send a request's "
           "headers, and again its body.", SERVER, check=_positive, metavar="SECONDS"),
)

BY_NAME: dict[str, Option] = {o.name: o for o in OPTIONS}


def group(*groups: str) -> tuple[str, ...]:
    """Names of the options in these groups, in declaration order."""
    return tuple(o.name for o in OPTIONS if o.group in groups)


def lookup(name: str) -> Option:
    """The option called `name` (kebab-case and a few aliases accepted), or a usage error."""
    key = ALIASES.get(name.lower(), name.lower().replace("-", "_"))
    if key in BY_NAME:
        return BY_NAME[key]
    import difflib

    near = difflib.get_close_matches(key, list(BY_NAME), n=1)
    hint = f" (did you mean {near[0]}?)" if near else ""
    raise UsageError(f"no option {name!r}{hint}")


ALIASES = {"temp": "temperature", "mode": "spec", "n": "max_tokens", "gpu_layers":
           "n_gpu_layers", "n_ctx": "ctx"}


def generation_options(values: Mapping[str, Any]) -> GenerationOptions:
    """The engine's options from resolved values (defaults for any not given)."""
    def get(name: str) -> Any:
        return values.get(name, BY_NAME[name].default)

    try:
        sampling = SamplingOptions(  # checks every value, seed -1 (random) included
            temperature=get("temperature"), top_k=get("top_k"), top_p=get("top_p"),
            min_p=get("min_p"), repeat_penalty=get("repeat_penalty"),
            repeat_last_n=get("repeat_last_n"), seed=get("seed"))
        return GenerationOptions(sampling=sampling, max_tokens=get("max_tokens"),
                                 stop=tuple(get("stop") or ()), spec=get("spec"),
                                 draft_max=get("draft_max"),
                                 structure=structure_from_options(get("format"), get("schema")))
    except OptionError as exc:
        raise UsageError(f"invalid option: {exc}") from None


def env_values(names: Iterable[str], environ: Mapping[str, str] | None = None
               ) -> dict[str, Any]:
    """Options set as SPECCHAT_<NAME> in the environment (an empty value counts as unset)."""
    environ = os.environ if environ is None else environ
    out: dict[str, Any] = {}
    for name in names:
        opt = BY_NAME[name]
        raw = environ.get(opt.env)
        if raw is None or raw == "":
            continue
        try:
            out[name] = opt.from_text(raw)
        except OptionError as exc:
            raise UsageError(f"environment variable {opt.env}: {exc}") from None
    return out
