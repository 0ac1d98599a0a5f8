"""Critical XID events from NVML, counted per GPU by a background thread.

NVML delivers XIDs (the driver's error codes: 48 double-bit ECC, 79 fell off the bus,
94/95 contained/uncontained ECC, 119/120 GSP faults, ...) through an event set that a
thread waits on (``nvmlEventSetWait_v2`` with a timeout, so ``stop`` is prompt).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

from tandem.telemetry.nvml import (
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_TIMEOUT,
    NvmlSession,
    error_code,
)

logger = logging.getLogger(__name__)

_ERROR_BACKOFF_S = 1.0


@dataclass(frozen=True, slots=True)
class XidEvent:
    gpu_index: int
    xid: int


class XidWatcher:
    def __init__(self, session: NvmlSession, *, poll_ms: int = 500) -> None:
        self._session = session
        self._poll_ms = poll_ms
        self._event_set: Any = None
        self._counts: dict[int, Counter[int]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def register(self) -> bool:
        """Subscribe every GPU to critical XIDs; False when NVML or the GPUs cannot."""
        nvml = self._session.nvml
        if nvml is None or not self._session.handles:
            return False
        event_set = nvml.nvmlEventSetCreate()
        registered = 0
        for index, handle in enumerate(self._session.handles):
            try:
                nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, event_set)
                registered += 1
            except nvml.NVMLError as error:
                if error_code(nvml, error) != NVML_ERROR_NOT_SUPPORTED:
                    logger.warning("cannot watch XIDs of GPU %s: %s", index, error)
        if not registered:
            nvml.nvmlEventSetFree(event_set)
            return False
        self._event_set = event_set
        return True

    def start(self) -> bool:
        if not self.register():
            return False
        self._thread = threading.Thread(target=self._run, name="xid-watcher", daemon=True)
        self._thread.start()
        return True

    def poll_once(self, timeout_ms: int) -> XidEvent | None:
        """Wait up to ``timeout_ms`` for one event and count it."""
        nvml = self._session.nvml
        if nvml is None or self._event_set is None:
            return None
        try:
            data = nvml.nvmlEventSetWait_v2(self._event_set, timeout_ms)
        except nvml.NVMLError as error:
            if error_code(nvml, error) != NVML_ERROR_TIMEOUT:
                logger.warning("waiting for XID events failed: %s", error)
                self._stop.wait(_ERROR_BACKOFF_S)
            return None
        event = XidEvent(self._index_of(data.device), int(data.eventData))
        logger.warning("GPU %s reported XID %s", event.gpu_index, event.xid)
        with self._lock:
            self._counts.setdefault(event.gpu_index, Counter())[event.xid] += 1
        return event

    def counts(self) -> dict[int, dict[int, int]]:
        with self._lock:
            return {gpu: dict(c) for gpu, c in self._counts.items()}

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        nvml, event_set, self._event_set = self._session.nvml, self._event_set, None
        if nvml is not None and event_set is not None:
            nvml.nvmlEventSetFree(event_set)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll_once(self._poll_ms)

    def _index_of(self, handle: Any) -> int:
        nvml = self._session.nvml
        assert nvml is not None
        try:
            return nvml.nvmlDeviceGetIndex(handle)
        except nvml.NVMLError:
            return -1
