"""API keys through real processes: a frontend over a null worker, the official client.

The frontend reads key records from directories as it would from mounted Secrets; the
test changes them while it runs, as the kubelet does when a Secret changes."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import openai
import pytest
import yaml

from tandem.devcluster.ports import allocate_ports
from tandem.frontend.api_keys import dump_record, new_key, new_record

pytestmark = pytest.mark.integration

RANDOM_MODEL = Path(__file__).with_name("random-model.yaml")


def add_key(directory: Path, key_id: str, tenant: str) -> str:
    key = new_key()
    (directory / key_id).write_text(dump_record(new_record(key_id, tenant, key)))
    return key


def start(argv: list[str]) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith("READY "):
            return proc, int(line.split()[1])
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError(f"{argv[2]} did not start")


def stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def frontend_document(tmp_path: Path, worker_port: int, **fields: object) -> Path:
    doc = {
        "contractVersion": 1,
        "model": yaml.safe_load(RANDOM_MODEL.read_text()),
        "workers": {"decode": f"127.0.0.1:{worker_port}"},
        **fields,
    }
    path = tmp_path / "frontend.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture
def null_worker() -> Iterator[int]:
    proc, port = start(
        [
            sys.executable,
            "-m",
            "tandem_dev.doubles.null_worker",
            "--role",
            "decode",
            "--tokenizer",
            "byte",
        ]
    )
    try:
        yield port
    finally:
        stop(proc)


def until(condition: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def answers(base_url: str, key: str) -> bool:
    client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=30)
    try:
        reply = client.chat.completions.create(
            model="reference", messages=[{"role": "user", "content": "hi"}], max_tokens=4
        )
    except openai.AuthenticationError:
        return False
    return reply.choices[0].finish_reason in {"length", "stop"}


def get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_keys_rotate_and_revoke_in_a_running_frontend_and_metrics_stay_off_the_api(
    tmp_path: Path, null_worker: int
) -> None:
    keys = tmp_path / "keys"
    keys.mkdir()
    old = add_key(keys, "team-a-1", "team-a")
    metrics_port = allocate_ports(1)[0]
    doc = frontend_document(
        tmp_path,
        null_worker,
        apiKeys={"directories": [str(keys)], "reloadSeconds": 0.2},
        metricsPort=metrics_port,
    )
    proc, port = start(
        [sys.executable, "-m", "tandem.frontend", "--config", str(doc), "--port", "0"]
    )
    base = f"http://127.0.0.1:{port}"
    try:
        until(lambda: get(f"{base}/readyz") == 200)
        assert answers(f"{base}/v1", old)
        assert not answers(f"{base}/v1", new_key())

        new = add_key(keys, "team-a-2", "team-a")  # rotation: the new key first ...
        until(lambda: answers(f"{base}/v1", new))
        (keys / "team-a-1").unlink()  # ... then the old one revoked, same process
        until(lambda: not answers(f"{base}/v1", old))
        assert answers(f"{base}/v1", new)
        assert proc.poll() is None

        assert get(f"{base}/metrics") == 404
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics") as scrape:
            text = scrape.read().decode()
        assert "tandem_frontend_api_keys 1.0" in text
        assert 'tandem_frontend_errors_total{code="invalid_api_key"}' in text
    finally:
        stop(proc)


def test_a_frontend_without_keys_refuses_to_listen_beyond_loopback(
    tmp_path: Path, null_worker: int
) -> None:
    doc = frontend_document(tmp_path, null_worker)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "tandem.frontend",
            "--config",
            str(doc),
            "--host",
            "0.0.0.0",
            "--port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert "refusing to serve without API keys on 0.0.0.0" in run.stderr
    assert "Traceback" not in run.stderr
