"""A minimal keep-alive HTTP/1.1 load client for the frontend benchmarks: fast enough
not to be the bottleneck, bounded in count and time."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Sequence


class Connection:
    """A minimal keep-alive HTTP/1.1 client: fast enough not to be the bottleneck."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Connection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        head = (
            f"{method} {path} HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n\r\n"
        ).encode()
        self.writer.write(head + body)
        await self.writer.drain()
        status_line, *header_lines = (
            (await self.reader.readuntil(b"\r\n\r\n")).decode().split("\r\n")
        )
        headers = {}
        for line in header_lines:
            if ":" in line:
                key, value = line.split(":", 1)
                headers[key.strip().lower()] = value.strip()
        status = int(status_line.split()[1])
        if "content-length" in headers:
            return status, await self.reader.readexactly(int(headers["content-length"]))
        chunks: list[bytes] = []
        while True:  # chunked (SSE)
            size = int((await self.reader.readuntil(b"\r\n")).strip(), 16)
            data = await self.reader.readexactly(size + 2)
            if size == 0:
                return status, b"".join(chunks)
            chunks.append(data[:-2])

    def close(self) -> None:
        self.writer.close()


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


async def drive(
    port: int, bodies: Sequence[bytes], count: int, concurrency: int, budget_s: float
) -> tuple[list[float], float, int]:
    """``count`` requests over ``concurrency`` connections, cycling through ``bodies``;
    (latencies, elapsed, errors)."""
    next_body = itertools.cycle(bodies).__next__
    connections = [await Connection.open(port) for _ in range(concurrency)]
    latencies: list[float] = []
    errors = 0
    remaining = count
    deadline = time.monotonic() + budget_s

    async def worker(connection: Connection) -> None:
        nonlocal remaining, errors
        while remaining > 0 and time.monotonic() < deadline:
            remaining -= 1
            started = time.perf_counter()
            status, _ = await connection.request("POST", "/v1/chat/completions", next_body())
            latencies.append(time.perf_counter() - started)
            errors += status != 200

    started = time.perf_counter()
    async with asyncio.timeout(budget_s + 30):
        await asyncio.gather(*(worker(c) for c in connections))
    elapsed = time.perf_counter() - started
    for connection in connections:
        connection.close()
    return latencies, elapsed, errors
