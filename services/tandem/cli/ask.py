"""``tandem ask``: send one chat request to a running local cluster and stream the answer.

It speaks plain OpenAI HTTP (``/v1/chat/completions`` with SSE), exactly what any client
would send, so it doubles as a smoke test of the endpoint ``tandem up`` printed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import httpx

from tandem.cli.local import not_running, pick_cluster
from tandem.runtime.state import cluster_dir, read_state


def _endpoint(name: str | None) -> str | None:
    picked = pick_cluster(name)
    if picked is None:
        return None
    state = read_state(cluster_dir(picked))
    if state is None or not state.endpoint:
        print(f"error: {not_running(picked)}", file=sys.stderr)
        return None
    return state.endpoint


# Control characters other than newline and tab become visible escapes: the endpoint may
# be anyone's, and whatever its model emits must not be able to drive the user's terminal.
_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x20), 0x7F) if c not in (0x09, 0x0A)}


def _printable(text: str) -> str:
    return text.translate(_CONTROL)


def _error_message(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return response.text[:200]


def ask(
    endpoint: str,
    model: str | None,
    prompt: str,
    max_tokens: int,
    timeout_s: float,
    temperature: float = 0.0,
    api_key: str | None = None,
) -> int:
    base = endpoint.rstrip("/")
    # A frontend in a Kubernetes cluster requires a key (tandem keys add); a local one
    # (tandem up) needs none and ignores it.
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    with httpx.Client(timeout=timeout_s, headers=headers) as client:
        if model is None:
            models = client.get(f"{base}/models")
            if models.status_code != 200:
                print(
                    f"error: HTTP {models.status_code}: {_error_message(models)}",
                    file=sys.stderr,
                )
                return 1
            model = str(models.json()["data"][0]["id"])
        body: dict[str, Any] = {
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            "temperature": temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        with client.stream("POST", f"{base}/chat/completions", json=body) as response:
            if response.status_code != 200:
                response.read()
                print(
                    f"error: HTTP {response.status_code}: {_error_message(response)}",
                    file=sys.stderr,
                )
                return 1
            usage: dict[str, Any] = {}
            finish = None
            for line in response.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line.removeprefix("data: "))
                for choice in chunk.get("choices", []):
                    sys.stdout.write(_printable(choice.get("delta", {}).get("content") or ""))
                    finish = choice.get("finish_reason") or finish
                usage = chunk.get("usage") or usage
                sys.stdout.flush()
    print()
    print(
        f"[model {model}: {usage.get('prompt_tokens', '?')} prompt tokens, "
        f"{usage.get('completion_tokens', '?')} completion tokens, finish_reason={finish}]"
    )
    return 0


def cmd_ask(args: argparse.Namespace) -> int:
    endpoint = args.endpoint or _endpoint(args.name)
    if endpoint is None:
        return 1
    try:
        return ask(
            endpoint,
            args.model,
            args.prompt,
            args.max_tokens,
            args.timeout,
            args.temperature,
            api_key=args.api_key or os.environ.get("OPENAI_API_KEY") or None,
        )
    except httpx.ConnectError as exc:
        print(f"error: nothing answers at {endpoint} ({exc}); is it running?", file=sys.stderr)
        return 1
    except httpx.HTTPError as exc:
        print(f"error: {endpoint}: {exc}", file=sys.stderr)
        return 1


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("ask", help="send one chat request to a local cluster")
    p.add_argument("prompt", help="the user message")
    p.add_argument("--name", help="the local cluster (default: the only one running)")
    p.add_argument("--endpoint", help="an OpenAI base URL instead, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--model", help="model name (default: the first one the endpoint lists)")
    p.add_argument("--max-tokens", type=int, default=48, help="tokens to generate (default 48)")
    # Greedy by default: a small model (the laptop's SmolLM2-135M) answers a factual
    # question correctly and the same way every time; OpenAI's default of 1 rambles.
    p.add_argument(
        "--temperature", type=float, default=0.0, help="sampling temperature (default 0: greedy)"
    )
    p.add_argument("--timeout", type=float, default=120.0, help="seconds (default 120)")
    p.add_argument(
        "--api-key",
        help="sent as 'Authorization: Bearer KEY' (default: $OPENAI_API_KEY); a cluster's "
        "frontend requires one (tandem keys add), a local one needs none",
    )
    p.set_defaults(handler=cmd_ask)
