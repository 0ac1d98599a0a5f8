"""NVIDIA Dynamo 1.6.1's Rust frontend as a side-by-side baseline for the frontend bench.

Dynamo's ``python -m dynamo.frontend`` (OpenAI HTTP, Rust tokenizer and router) in front
of two ``python -m dynamo.mocker`` workers (prefill + decode, answering at once) run on
this machine with file discovery, loopback only (the recipe and its pitfalls are in
shared/notes/stack-facts.md). It gets the same tokenizer as Tandem's frontend: the GGUF
file's tokenizer exported as a Hugging Face model directory (``tokenizer.json`` written
by ``tokenizers`` itself, the file's chat template in ``tokenizer_config.json``).

Dynamo lives in its own virtualenv (``make bench`` builds ``.bench/dynamo``; it pins
``kubernetes<33`` and brings its own transformers-free frontend), never in Tandem's.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tandem.tokenization.gguf_tokenizer import GgufTokenizer

DYNAMO_PYTHON = Path(".bench/dynamo/bin/python")
LOOPBACK_ENV = (
    "DYN_TCP_RPC_HOST",
    "DYN_EVENT_PLANE_HOST",
    "DYN_TCP_RESPONSE_STREAM_HOST",
    "DYN_SYSTEM_HOST",
)


def export_model_dir(tokenizer: GgufTokenizer, directory: Path, *, context: int) -> Path:
    """A Hugging Face-style model directory carrying ``tokenizer``'s files."""
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.hf_tokenizer.save(str(directory / "tokenizer.json"))
    names = {i: t for t, i in tokenizer.special_tokens.items()}
    (directory / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "chat_template": tokenizer.chat_template_source,
                "bos_token": names[tokenizer.bos_token_id],
                "eos_token": names[tokenizer.eos_token_id],
                "model_max_length": context,
                "tokenizer_class": "PreTrainedTokenizerFast",
            }
        )
    )
    (directory / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "vocab_size": tokenizer.vocab_size,
                "max_position_embeddings": context,
                "bos_token_id": tokenizer.bos_token_id,
                "eos_token_id": tokenizer.eos_token_id,
                "hidden_size": 576,
                "num_hidden_layers": 30,
                "num_attention_heads": 9,
                "num_key_value_heads": 3,
            }
        )
    )
    (directory / "generation_config.json").write_text(
        json.dumps({"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id})
    )
    return directory


def dynamo_available(python: Path = DYNAMO_PYTHON) -> bool:
    return python.is_file()


@dataclass(frozen=True, slots=True)
class DynamoRun:
    url: str
    frontend_pid: int


@contextmanager
def dynamo_frontend(
    model_dir: Path,
    *,
    model: str,
    port: int,
    frontend_cores: set[int] | None,
    python: Path = DYNAMO_PYTHON,
    startup_timeout_s: float = 180.0,
) -> Iterator[DynamoRun]:
    """Dynamo's frontend (pinned to ``frontend_cores``) + a prefill and a decode mocker."""
    with tempfile.TemporaryDirectory(prefix="dynamo-bench-") as state:
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "DYN_FILE_KV": state,
            **dict.fromkeys(LOOPBACK_ENV, "127.0.0.1"),
        }
        common = ["--discovery-backend", "file"]
        mocker = [
            str(python), "-m", "dynamo.mocker", "--model-path", str(model_dir),
            "--model-name", model, "--speedup-ratio", "1000000",
            "--kv-transfer-bandwidth", "0", *common,
        ]  # fmt: skip
        frontend = [
            str(python), "-m", "dynamo.frontend", "--http-host", "127.0.0.1",
            "--http-port", str(port), "--router-mode", "kv", *common,
        ]  # fmt: skip
        processes: list[subprocess.Popen[bytes]] = []
        try:
            for mode in ("prefill", "decode"):
                processes.append(_spawn([*mocker, "--disaggregation-mode", mode], env, None))
            processes.append(_spawn(frontend, env, frontend_cores))
            url = f"http://127.0.0.1:{port}"
            _await_model(url, model, processes, startup_timeout_s)
            yield DynamoRun(url, processes[-1].pid)
        finally:
            for process in reversed(processes):
                process.terminate()
            for process in processes:
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()


def _spawn(
    argv: Sequence[str], env: dict[str, str], cores: set[int] | None
) -> subprocess.Popen[bytes]:
    def pin() -> None:  # in the child, before any of its threads exist
        if cores is not None:
            os.sched_setaffinity(0, cores)

    return subprocess.Popen(
        argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=pin
    )


def _await_model(
    url: str, model: str, processes: Sequence[subprocess.Popen[bytes]], timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in processes):
            raise RuntimeError("a Dynamo process exited while starting")
        try:
            listed = httpx.get(f"{url}/v1/models", timeout=2).json().get("data", [])
            if any(m.get("id") == model for m in listed):
                return
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.5)
    raise RuntimeError(f"Dynamo did not list model {model!r} within {timeout_s:.0f} s")
