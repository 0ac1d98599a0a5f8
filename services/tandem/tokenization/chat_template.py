"""Chat templates shipped with a model, rendered as Hugging Face renders them.

A template is Jinja source from the model file (``tokenizer.chat_template`` in a GGUF).
It runs in jinja2's ``ImmutableSandboxedEnvironment`` with the settings transformers uses
for ``apply_chat_template`` (``trim_blocks``, ``lstrip_blocks``, the ``loopcontrols``
extension, a ``tojson`` filter that keeps non-ASCII text, ``raise_exception`` and
``strftime_now``), so a template written for transformers renders the same text here.

Rendering also reports where each message's content landed in the text
(:meth:`ChatTemplate.render_segments`): the tokenizer encodes content as plain text and
only the template's own text with special tokens, so a user cannot forge a turn marker by
typing one (transformers would turn such text into the special token).
"""

from __future__ import annotations

import datetime
import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import jinja2
import jinja2.ext
import jinja2.sandbox

from tandem.tokenization.protocol import ChatMessage, TokenizationError


class ChatTemplateError(TokenizationError):
    """The template cannot be compiled, or refused these messages (its own message)."""


@dataclass(frozen=True, slots=True)
class Segment:
    text: str
    is_content: bool  # a message's content, verbatim (encode as plain text)


def _raise_exception(message: str) -> NoReturn:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(format: str) -> str:
    return datetime.datetime.now().strftime(format)


def _environment() -> jinja2.sandbox.ImmutableSandboxedEnvironment:
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


class ChatTemplate:
    """A compiled chat template; ``variables`` are the extra names it sees (e.g.
    ``bos_token``, ``eos_token``)."""

    def __init__(self, source: str, variables: Mapping[str, str]) -> None:
        try:
            self._template = _environment().from_string(source)
        except jinja2.exceptions.TemplateError as error:
            raise ChatTemplateError(
                f"the model's chat template does not compile: {error}"
            ) from None
        self._variables = dict(variables)

    def render(self, messages: Sequence[ChatMessage], *, add_generation_prompt: bool) -> str:
        """The text transformers' ``apply_chat_template(..., tokenize=False)`` gives."""
        return self._render([m.content for m in messages], messages, add_generation_prompt)

    def render_segments(
        self, messages: Sequence[ChatMessage], *, add_generation_prompt: bool
    ) -> list[Segment]:
        """The rendered text split into template text and message contents.

        Each content is replaced by a per-call random marker, rendered, and put back;
        a template that transforms or drops contents (so a marker does not come back
        exactly once, in order) is refused rather than guessed at."""
        nonce = secrets.token_hex(16)
        markers = [f"\x00{nonce}:{index}\x00" for index in range(len(messages))]
        text = self._render(markers, messages, add_generation_prompt)
        segments: list[Segment] = []
        rest = text
        for marker, message in zip(markers, messages, strict=True):
            before, found, after = rest.partition(marker)
            if not found or marker in after:
                raise ChatTemplateError(
                    "the model's chat template rewrites message content, so content holding "
                    "special-token text cannot be kept as plain text; remove special-token "
                    "text such as '<|...|>' from the messages"
                )
            if before:
                segments.append(Segment(before, is_content=False))
            if message.content:
                segments.append(Segment(message.content, is_content=True))
            rest = after
        if rest:
            segments.append(Segment(rest, is_content=False))
        return segments

    def _render(
        self,
        contents: Sequence[str],
        messages: Sequence[ChatMessage],
        add_generation_prompt: bool,
    ) -> str:
        conversation = [
            {"role": m.role, "content": content}
            for m, content in zip(messages, contents, strict=True)
        ]
        try:
            return self._template.render(
                messages=conversation,
                add_generation_prompt=add_generation_prompt,
                **self._variables,
            )
        except Exception as error:  # template code is the model's: any failure is its refusal
            raise ChatTemplateError(
                f"the model's chat template refused the messages: {error}"
            ) from None
