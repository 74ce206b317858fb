"""Structured answers from local models: the prompt for a conversation with tools, and the
grammar (an engine Constraint) for a JSON format, a schema, a grammar or a tool choice.

A grammar alone makes a model write JSON, not know what JSON is wanted: a model that meant to
answer in prose and is held to a schema it never saw writes empty or endless fields. So, as
OpenAI's own structured outputs do, the model is also told the format: a note at the end of
the last user message (`with_format_note`), tokenized as plain text like the rest of it.

`Guides` is what the local Runtime asks; `ModelGuides` answers for a real model through its
chat template (llm/template.py) and llguidance (llm/grammar.py, llm/tools.py). Tests lend a
Runtime guides of their own built on fake grammars.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from specchat.backend.base import Message
from specchat.engine.constraint import Constraint
from specchat.engine.options import Structure
from specchat.errors import UsageError
from specchat.llm.lark import GrammarError, json_body
from specchat.llm.template import ChatTemplate, chat_tokens
from specchat.llm.tools import (
    CLOSE,
    OPEN,
    ToolSet,
    native,
    native_history,
    plain_history,
    tool_lark,
)

if TYPE_CHECKING:
    from specchat.llm.grammar import Grammars
    from specchat.llm.model import LlamaModel


class Guides(Protocol):
    def prompt(self, messages: Sequence[Message], tools: ToolSet) -> list[int]:
        """The chat prompt for a conversation that has (or had) tools."""
        ...

    def constraint(self, structure: Structure | None,
                   tools: ToolSet | None) -> Constraint | None:
        """A fresh constraint for one answer; None when nothing constrains it."""
        ...


def format_note(structure: Structure | None, beside_tools: bool = False) -> str | None:
    """What the model is told about the answer's format (None: nothing); `beside_tools`:
    the format of an answer that calls none of the tools it was offered."""
    if structure is None or structure.kind == "grammar":
        return None
    answer = "Unless you call a tool, answer" if beside_tools else "Answer"
    if structure.kind == "json":
        return f"{answer} with one JSON object."
    schema = json.dumps(json.loads(structure.text), ensure_ascii=False, separators=(",", ":"))
    return f"{answer} with JSON that matches this JSON schema:\n{schema}"


def with_format_note(messages: Sequence[Message], structure: Structure | None,
                     beside_tools: bool = False) -> Sequence[Message]:
    """The conversation with the format note after the last user message's text (or in the
    system message, when the conversation does not end with the user)."""
    note = format_note(structure, beside_tools)
    if note is None:
        return messages
    out = [dict(m) for m in messages]
    if out and out[-1].get("role") == "user" and isinstance(out[-1].get("content"), str):
        out[-1]["content"] = f"{out[-1]['content']}\n\n{note}"
    elif out and out[0].get("role") == "system":
        out[0]["content"] = f"{out[0].get('content') or ''}\n\n{note}".lstrip()
    else:
        out.insert(0, {"role": "system", "content": note})
    return out


def uses_tools(messages: Sequence[Mapping[str, Any]], tools: ToolSet | None) -> bool:
    """Whether a conversation needs the tool-aware prompt: tools offered, or tool calls and
    results among its messages."""
    return bool(tools is not None and tools.offered) or any(
        m.get("role") == "tool" or m.get("tool_calls") for m in messages)


class ModelGuides:
    """Guides for a real target model (its template, its vocabulary)."""

    def __init__(self, model: LlamaModel, template: ChatTemplate) -> None:
        self.model = model
        self.template = template
        self.native = not template.is_fallback and native(template.source)
        self._grammars: Grammars | None = None

    @property
    def grammars(self) -> Grammars:
        if self._grammars is None:
            from specchat.llm.grammar import Grammars  # llguidance loads with the first grammar

            self._grammars = Grammars(self.model)
        return self._grammars

    def prompt(self, messages: Sequence[Message], tools: ToolSet) -> list[int]:
        offered = [t.as_openai() for t in tools.offered]
        if self.native:
            return chat_tokens(self.model, self.template, native_history(messages), offered)
        return chat_tokens(self.model, self.template, plain_history(messages, tools.offered))

    def constraint(self, structure: Structure | None,
                   tools: ToolSet | None) -> Constraint | None:
        grammars = self.grammars
        if tools is not None and tools.callable:
            try:
                lark = tool_lark(tools, grammars.special_token(OPEN),
                                 grammars.special_token(CLOSE), _beside_tools(structure, tools))
                return grammars.matcher(lark) if lark else None
            except GrammarError as exc:
                raise UsageError(f"tools: {exc}", param="tools") from None
        if structure is None:
            return None
        try:
            return grammars.structure(structure)
        except GrammarError as exc:
            raise UsageError(f"{structure.kind.replace('_', ' ')}: {exc}",
                             param="response_format") from None


def _beside_tools(structure: Structure | None, tools: ToolSet) -> str | None:
    """The rule an answer without a call must match under "auto" (None: free text). A call
    forced by tool_choice is the answer, whatever the response_format says, as in OpenAI's
    API; a whole grammar cannot be joined with the tools' one."""
    if structure is None or tools.choice != "auto":
        return None
    if structure.kind == "grammar":
        raise UsageError("a grammar together with tools is not supported: send one of them, "
                         "or response_format json_schema", param="grammar")
    try:
        return json_body(structure, strict=structure.strict)
    except GrammarError as exc:
        raise UsageError(f"{structure.kind.replace('_', ' ')}: {exc}",
                         param="response_format") from None
