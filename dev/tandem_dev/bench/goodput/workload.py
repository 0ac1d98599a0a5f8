"""Inputs for aiperf: chat prompts whose rendered gpt-oss prompt is exactly ISL tokens,
and a local tokenizer directory so aiperf never reaches for the Hugging Face hub.

A prompt is ``"Request N:"`` followed by ``" the"`` repeated: in o200k ``" the"`` is one
token however often it repeats, so the filler is sized from the harmony rendering of the
head and checked by rendering the whole prompt again. aiperf counts tokens from the
server's ``usage`` (``--use-server-token-count``); its own tokenizer (a word-level one
trained here with the ``tokenizers`` package) is only there because aiperf insists.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from tandem.tokenization import ChatMessage
from tandem.tokenization.harmony import HarmonyTokenizer

FILLER = " the"


def build_prompt(tokenizer: HarmonyTokenizer, isl: int, index: int) -> str:
    head = f"Request {index}:"
    overhead = len(tokenizer.apply_chat_template([ChatMessage("user", head)]))
    if overhead > isl:
        raise ValueError(f"ISL {isl} is shorter than the chat framing ({overhead} tokens)")
    text = head + FILLER * (isl - overhead)
    rendered = len(tokenizer.apply_chat_template([ChatMessage("user", text)]))
    if rendered != isl:
        raise ValueError(f"prompt {index} renders to {rendered} tokens, not {isl}")
    return text


def write_prompts(
    path: Path, tokenizer: HarmonyTokenizer, *, isl: int, osl: int, count: int
) -> Path:
    """aiperf's single_turn JSONL: distinct prompts, each asking for ``osl`` tokens."""
    with path.open("w") as f:
        for i in range(count):
            line = {"text": build_prompt(tokenizer, isl, i), "output_length": osl}
            f.write(json.dumps(line) + "\n")
    return path


def write_client_tokenizer(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    words = f"Request {FILLER.strip()} : 0 1 2 3 4 5 6 7 8 9"
    tokenizer.train_from_iterator([words], trainers.WordLevelTrainer(special_tokens=["[UNK]"]))
    tokenizer.save(str(directory / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]"}
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return directory
