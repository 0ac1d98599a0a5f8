"""API keys at the frontend: the official client against the real app and router."""

from __future__ import annotations

from pathlib import Path

import httpx
import openai
import pytest

from tandem.frontend.api_keys import dump_record, new_key, new_record
from tandem.frontend.config import ApiKeySettings

from .harness import MODEL, Frontend, frontend


def add_key(directory: Path, key_id: str, tenant: str) -> str:
    key = new_key()
    directory.mkdir(parents=True, exist_ok=True)
    (directory / key_id).write_text(dump_record(new_record(key_id, tenant, key)))
    return key


def client(fe: Frontend, key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url="http://frontend/v1", api_key=key, max_retries=0, http_client=fe.client
    )


async def chat(fe: Frontend, key: str) -> str:
    answer = await client(fe, key).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4
    )
    return answer.choices[0].finish_reason or ""


def settings(tmp_path: Path) -> ApiKeySettings:
    return ApiKeySettings(directories=[str(tmp_path / "keys")], reload_seconds=0.05)


async def test_a_missing_or_wrong_key_gets_401_with_an_openai_error(tmp_path: Path) -> None:
    good = add_key(tmp_path / "keys", "team-a-1", "team-a")
    async with frontend(api_keys=settings(tmp_path)) as fe:
        assert await chat(fe, good) in {"length", "stop"}
        wrong = new_key()
        with pytest.raises(openai.AuthenticationError) as caught:
            await chat(fe, wrong)
        assert caught.value.status_code == 401
        assert caught.value.code == "invalid_api_key"
        assert caught.value.response.headers["www-authenticate"] == "Bearer"
        assert wrong not in caught.value.message
        # The official client refuses to send no key at all: a bare request does.
        for headers in ({}, {"authorization": "Basic eDp5"}, {"authorization": "Bearer  "}):
            response = await fe.client.post("/v1/chat/completions", json={}, headers=headers)
            assert response.status_code == 401
            assert response.json()["error"]["code"] == "missing_api_key"
            assert response.json()["error"]["type"] == "invalid_request_error"
        assert fe.metric("tandem_frontend_errors_total", code="invalid_api_key") == 1
        assert fe.metric("tandem_frontend_errors_total", code="missing_api_key") == 3


async def test_probes_stay_open_without_a_key(tmp_path: Path) -> None:
    async with frontend(api_keys=settings(tmp_path)) as fe:
        assert (await fe.client.get("/healthz")).status_code == 200
        assert (await fe.client.get("/readyz")).status_code in {200, 503}


async def test_a_frontend_without_keys_serves_the_anonymous_tenant() -> None:
    async with frontend() as fe:
        assert await chat(fe, "anything")
        assert (await fe.client.get("/metrics")).status_code == 200


async def test_with_a_metrics_port_the_api_port_does_not_serve_metrics(tmp_path: Path) -> None:
    key = add_key(tmp_path / "keys", "k", "team-a")
    async with frontend(api_keys=settings(tmp_path), metrics_port=9091) as fe:
        for headers in ({}, {"authorization": f"Bearer {key}"}):
            assert (await fe.client.get("/metrics", headers=headers)).status_code == 404
        transport = httpx.ASGITransport(app=fe.app.state.metrics_app)
        async with httpx.AsyncClient(transport=transport, base_url="http://m") as scraper:
            scrape = await scraper.get("/metrics")
        assert scrape.status_code == 200
        assert "tandem_frontend_api_keys 1.0" in scrape.text
