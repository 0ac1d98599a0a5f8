"""Every tier: Tandem's file cache (the rebuilt o200k vocabulary) lives in this session's
temporary directory, for this process and the processes its tests start."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tandem.tokenization.o200k import CACHE_ENV


@pytest.fixture(scope="session", autouse=True)
def _private_tandem_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    previous = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(tmp_path_factory.mktemp("tandem-cache"))
    yield
    if previous is None:
        os.environ.pop(CACHE_ENV, None)
    else:
        os.environ[CACHE_ENV] = previous
