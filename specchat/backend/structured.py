"""Structured answers from local models: the prompt for a conversation with tools, and the
grammar (an engine Constraint) for a JSON format, a schema, a grammar or a tool choice.

`Guides` is what the local Runtime asks; `ModelGuides` answers for a real model through its
chat template (llm/template.py) and llguidance (llm/grammar.py, llm/tools.py). Tests lend a
Runtime guides of their own built on fake grammars.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from specchat.backend.base import Message
from specchat.engine.constraint import Constraint
from specchat.engine.options import Structure
from specchat.errors import UsageError
from specchat.llm.lark import GrammarError
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


def uses_tools(messages: Sequence[Mapping[str, Any]], tools: ToolSet | None) -> bool:
    """Whether a conversation needs the tool-aware prompt: tools offered, or tool calls and
    results in its history."""
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
            if structure is not None and tools.choice == "auto":
                raise UsageError("response_format together with tools is not supported: "
                                 "send one of them, or tool_choice 'required'",
                                 param="response_format")
            lark = tool_lark(tools, grammars.special_token(OPEN), grammars.special_token(CLOSE))
            try:
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
