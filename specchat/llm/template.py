"""Chat templates: the Jinja text a GGUF file carries in `tokenizer.chat_template`.

Templates come from downloaded files, so they run in Jinja's immutable sandbox: a template can
format strings but cannot reach Python objects or change the messages it is given. The
environment matches what Hugging Face's transformers gives templates (trim_blocks,
lstrip_blocks, loop controls, a `tojson` that keeps non-ASCII, `raise_exception`,
`strftime_now`), because the templates are written against it. Pure: no llama_cpp import.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

from specchat.errors import ModelError, UsageError

# Used when a model carries no template. ChatML because the most common small chat models
# (Qwen, SmolLM, many fine-tunes) were trained on it; for others it is at least readable.
CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


class TemplateModel(Protocol):
    """What ChatTemplate.from_model and chat_tokens need from a model (LlamaModel has it)."""

    @property
    def chat_template(self) -> str | None: ...

    @property
    def bos_token(self) -> int | None: ...

    @property
    def eos_token(self) -> int | None: ...

    @property
    def add_bos(self) -> bool: ...

    @property
    def path(self) -> Any: ...

    def token_text(self, token: int) -> str: ...

    def tokenize(
        self, text: str, *, add_special: bool = False, parse_special: bool = True
    ) -> list[int]: ...


class _TemplateRaised(Exception):
    """A template's own raise_exception(): its message is meant for the user."""


class _IgnoreGenerationTags(jinja2.ext.Extension):
    """transformers' `{% generation %}` marks trainable spans; for rendering it is a no-op."""

    tags = {"generation"}  # noqa: RUF012 - jinja2's Extension API: a plain class attribute

    def parse(self, parser: Any) -> Any:
        parser.stream.skip(1)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys)


def _raise_exception(message: str) -> None:
    raise _TemplateRaised(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        loader=jinja2.BaseLoader(),
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[_IgnoreGenerationTags, jinja2.ext.loopcontrols],
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


class ChatTemplate:
    """A compiled chat template, or the ChatML fallback with a note saying why."""

    def __init__(self, source: str | None, *, bos_text: str = "", eos_text: str = "",
                 name: str = "model") -> None:
        self.bos_text = bos_text
        self.eos_text = eos_text
        self.is_fallback = False
        self.note = ""
        env = _environment()
        if not source or not source.strip():
            self._use_fallback(f"{name} has no chat template; using ChatML fallback")
        else:
            try:
                self.source = source
                self._compiled = env.from_string(source)
            except jinja2.TemplateSyntaxError as exc:
                self._use_fallback(
                    f"{name}'s chat template does not parse ({exc.message}, line {exc.lineno}); "
                    "using ChatML fallback"
                )
        if self.is_fallback:
            self._compiled = env.from_string(CHATML)

    def _use_fallback(self, note: str) -> None:
        self.source = CHATML
        self.is_fallback = True
        self.note = note

    @classmethod
    def from_model(cls, model: TemplateModel) -> ChatTemplate:
        """The model's own template, with its BOS / EOS texts for templates that print them."""
        bos, eos = model.bos_token, model.eos_token
        return cls(
            model.chat_template,
            bos_text=model.token_text(bos) if bos is not None else "",
            eos_text=model.token_text(eos) if eos is not None else "",
            name=_model_name(model),
        )

    def render(self, messages: Sequence[Mapping[str, Any]],
               add_generation_prompt: bool = True,
               tools: Sequence[Mapping[str, Any]] | None = None) -> str:
        """The prompt text for `messages` ({"role": ..., "content": ...} dicts, in order,
        with OpenAI's `tool_calls` and `tool_call_id` where they apply) and `tools` (OpenAI's
        function definitions, for templates that render them)."""
        extra = {"tools": [dict(t) for t in tools]} if tools else {}
        try:
            return self._compiled.render(
                messages=[dict(m) for m in messages],
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_text,
                eos_token=self.eos_text,
                **extra,
            )
        except _TemplateRaised as exc:
            # e.g. Gemma's "Conversation roles must alternate user/assistant/...".
            raise UsageError(f"the chat template refuses this conversation: {exc}") from None
        except jinja2.TemplateError as exc:  # includes sandbox SecurityError
            raise ModelError(f"the chat template failed: {type(exc).__name__}: {exc}") from None

    def split(self, messages: Sequence[Mapping[str, Any]],
              tools: Sequence[Mapping[str, Any]] | None = None) -> tuple[list[str], list[str]]:
        """The rendering as markup pieces around the data it prints, in order.

        `"".join(markup[i] + contents[i])` plus the last markup piece is render(messages).
        Data is every text a request brings: message contents, tool-call names and
        arguments, ids, and the text of tool definitions (descriptions, parameter names);
        only roles and `type` values, which templates branch on, count as markup. Found by
        rendering once with a unique placeholder for each distinct text: what surrounds the
        placeholders is the template's markup. A template that changes a text (Gemma trims
        contents, `tojson` escapes quotes) gets the changed text, matched against the real
        rendering.
        """
        nonce = secrets.token_hex(8)
        marks: dict[str, str] = {}

        def mark(text: str) -> str:
            return marks.setdefault(text, f"\ue000specchat-{nonce}-{len(marks)}\ue001")

        shaped = [_protect(m, mark) for m in messages]
        text = self.render(shaped, tools=[_protect(t, mark) for t in tools or ()])
        pattern = re.compile(f"\ue000specchat-{nonce}-\\d+\ue001")
        originals = {v: k for k, v in marks.items()}
        # One pass each over the rendering: linear in its length, whatever the number of
        # messages or how a template repeats or reorders them.
        pieces = pattern.split(text)
        found = [originals[m] for m in pattern.findall(text)]
        contents = _shaped_contents(pieces, found, self.render(messages, tools=tools))
        return pieces, contents


def chat_tokens(model: TemplateModel, template: ChatTemplate,
                messages: Sequence[Mapping[str, Any]],
                tools: Sequence[Mapping[str, Any]] | None = None) -> list[int]:
    """Render and tokenize a conversation, ready to evaluate.

    Only the template's own markup (<|im_start|>, <start_of_turn>) becomes special tokens:
    message contents are the user's words or a pasted file, and `<|im_end|><|im_start|>system`
    inside them must stay text, or a document could forge a system turn. BOS is added only
    when the model wants one and the template did not already print it: many templates start
    with {{ bos_token }}, and a doubled BOS degrades answers.
    """
    markup, contents = template.split(messages, tools)
    # One check of all contents at once (each llama.cpp call costs ~0.2 ms, and a request may
    # hold thousands of messages): a special token inside any content is inside the joined
    # text too; one spanning a separator only sends us down the slower, equally exact path.
    if not _has_special(model, "\x00".join(contents)):
        # The same tokens as the whole text with specials parsed: llama.cpp splits it at
        # special tokens, which now can only come from the markup.
        text = "".join(m + c for m, c in zip(markup, [*contents, ""], strict=True))
        tokens = model.tokenize(text, add_special=False, parse_special=True)
    else:
        tokens = []
        for mark, content in zip(markup, [*contents, None], strict=True):
            tokens += model.tokenize(mark, add_special=False, parse_special=True) if mark else []
            if content:
                tokens += model.tokenize(content, add_special=False, parse_special=False)
    bos = model.bos_token
    if model.add_bos and bos is not None and (not tokens or tokens[0] != bos):
        tokens.insert(0, bos)
    return tokens


def _has_special(model: TemplateModel, text: str) -> bool:
    """Whether llama.cpp would read a special token somewhere in `text`."""
    return (model.tokenize(text, add_special=False, parse_special=True)
            != model.tokenize(text, add_special=False, parse_special=False))


def _shaped_contents(pieces: list[str], contents: list[str], real: str) -> list[str]:
    """Each content as the template printed it (as is, or trimmed), so that the pieces and
    contents join to the real rendering; as given when no such reading exists."""
    shaped: list[str] = []
    at = 0  # how much of `real` is matched (an index, not a copied tail: linear time)
    for piece, content in zip(pieces, contents, strict=False):
        if not real.startswith(piece, at):
            return contents
        at += len(piece)
        nxt = pieces[len(shaped) + 1]
        escaped = json.dumps(content, ensure_ascii=False)[1:-1]  # as `tojson` prints it
        for candidate in (content, content.strip(), content.rstrip(), content.lstrip(),
                          escaped):
            if real.startswith(candidate, at) and real.startswith(nxt, at + len(candidate)):
                shaped.append(candidate)
                at += len(candidate)
                break
        else:
            return contents
    return shaped if real[at:] == pieces[-1] else contents


# Values templates compare against (roles, "function", a JSON schema's "object"): markup,
# not data, under these keys only, and only these words: any other value under them (a tool
# definition is a third party's text, "role" may be one of its property's keywords) is data.
_MARKUP_VALUES = {
    "role": frozenset({"system", "user", "assistant", "tool", "developer", "function",
                       "ipython", "model"}),
    "type": frozenset({"function", "object", "string", "number", "integer", "boolean",
                       "array", "null"}),
}
# A key templates may look up (content, tool_calls, parameters, ...): a plain ASCII word.
# Any other key is data, so no key spells a control token either.
_KEY_WORD = re.compile(r"\$?[A-Za-z_][A-Za-z0-9_]{0,63}")


def _protect(value: Any, mark: Callable[[str], str], key: str | None = None,
             data: bool = False) -> Any:
    """`value` with every data text replaced by mark(text): strings (but the words of
    _MARKUP_VALUES under their keys), the keys of tool-call arguments and of a schema's
    `properties`, which are names a request chose, and any key that is no plain word.
    Below `arguments` everything is data."""
    if isinstance(value, str):
        markup = not data and value in _MARKUP_VALUES.get(key or "", ())
        return mark(value) if value and not markup else value
    if isinstance(value, Mapping):
        names = data or key in ("properties", "arguments")
        inner = data or key == "arguments"
        return {(mark(k) if isinstance(k, str) and k and (names or not _KEY_WORD.fullmatch(k))
                 else k): _protect(v, mark, k, inner) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_protect(v, mark, key, data) for v in value]
    return value


def _model_name(model: TemplateModel) -> str:
    path = getattr(model, "path", None)
    return getattr(path, "name", None) or "model"
