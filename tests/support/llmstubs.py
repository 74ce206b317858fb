"""Hand-made stand-ins for what specchat.llm reads off a loaded model: a toy character
tokenizer with a chat template (and a Gemma-like template that only alternates roles), and
vocabulary descriptions to compare."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from specchat.llm.vocab import VocabInfo

GEMMA_LIKE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}"
    "{{ '<start_of_turn>' + message['role'] + '\n' + message['content'] | trim"
    " + '<end_of_turn>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)


@dataclass
class StubModel:
    """Just enough of LlamaModel for template code: a toy character tokenizer."""

    chat_template: str | None
    bos_token: int | None = 1
    eos_token: int | None = 2
    add_bos: bool = True
    path: Path = Path("stub.gguf")
    specials: dict[str, int] = field(default_factory=lambda: {"<bos>": 1, "<eos>": 2})

    def token_text(self, token: int) -> str:
        return {v: k for k, v in self.specials.items()}[token]

    def tokenize(self, text: str, *, add_special: bool = False,
                 parse_special: bool = True) -> list[int]:
        assert not add_special
        tokens: list[int] = []
        while text:
            special = next((s for s in self.specials if text.startswith(s)), None)
            special = special if parse_special else None
            if special:
                tokens.append(self.specials[special])
                text = text[len(special):]
            else:
                tokens.append(1000 + ord(text[0]))
                text = text[1:]
        return tokens


NORMAL, CONTROL, UNUSED = 4, 8, 2  # llama_token_attr bits


def info(name: str = "a.gguf", **changes: object) -> VocabInfo:
    base = VocabInfo(
        name=name,
        vocab_type="bpe",
        pre="qwen2",
        n_tokens=6,
        specials={"bos": 0, "eos": 1, "eot": None, "pad": None},
        add_bos=False,
        add_eos=False,
        eog=frozenset({1}),
        texts=(b"<s>", b"</s>", b"a", b"b", b"\xc3\xa9", b"cd"),
        types=(CONTROL, CONTROL, NORMAL, NORMAL, NORMAL, NORMAL),
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]
