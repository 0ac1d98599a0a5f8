"""The disk tier's file, read and written through NIXL's POSIX backend (nixl 1.5.1).

The file is cut into fixed slots of ``HEADER.size + payload_bytes``; a slot's bytes
move in one NIXL transfer between the file (``FILE`` descriptors: offset, length, file
descriptor) and DRAM (the header buffer here, and the payload's chunks where they live:
the host tier's arena, or the device pool's blocks), so no byte is copied through
Python. Every DRAM region a chunk may come from is registered once at start-up
(``regions``). The file is unlinked as soon as it is open: its blocks mean something
only to this process, and its space goes back when the process exits, however it exits.

The file is sparse and grows as slots are first written, so a disk that fills up (or a
file-size limit) surfaces as a failed write, which ``store`` answers by giving up the
disk tier. The agent runs in ``NIXL_THREAD_SYNC_NONE`` mode, so one transfer runs at a
time, under a lock: the engine's thread writes what it offloads while the onboarding
thread reads blocks back (the header buffer is shared too).
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tandem.kv.memory import region_address
from tandem.kv.nixl_transport import binding_errors
from tandem.kv.offload.records import HEADER

# How often a transfer still in flight is checked (the POSIX backend completes small
# transfers inside the post; larger ones in its I/O queue).
POLL_S = 0.00005

Chunk = tuple[int, int]  # (address, length) in registered DRAM


class DiskError(OSError):
    """A disk-tier transfer failed (no space, I/O error, file-size limit)."""


class DiskFile:
    def __init__(
        self, directory: Path, slots: int, payload_bytes: int, regions: Sequence[memoryview]
    ) -> None:
        from nixl._api import nixl_agent, nixl_agent_config

        self.slot_bytes = HEADER.size + payload_bytes
        directory.mkdir(parents=True, exist_ok=True)
        # Workers of several pools may share the directory; each writes its own file.
        self.path = directory / f"tandem-kv-{os.getpid()}-{uuid.uuid4().hex[:8]}.bin"
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        self.path.unlink()  # see the module docstring
        self._errors = binding_errors()
        config = nixl_agent_config(enable_prog_thread=False, backends=["POSIX"])
        self._agent: Any = nixl_agent(f"tandem-offload-{self.path.stem}", config)
        self._header = np.zeros(HEADER.size, dtype=np.uint8)
        self._lock = threading.Lock()
        dram = [(self._header.ctypes.data, HEADER.size, 0, "")]
        dram += [(region_address(r), r.nbytes, 0, "") for r in regions]
        # Registered for the process's lifetime, as the file is.
        self._agent.register_memory(dram, "DRAM")
        self._agent.register_memory([(0, slots * self.slot_bytes, self.fd, "")], "FILE")

    def write(self, slot: int, header: bytes, payload: Sequence[Chunk]) -> None:
        with self._lock:
            self._header[:] = np.frombuffer(header, dtype=np.uint8)
            self._transfer("WRITE", slot, payload)

    def read(self, slot: int, payload: Sequence[Chunk]) -> bytes:
        """Read a slot into ``payload``'s chunks; returns its header."""
        with self._lock:
            self._transfer("READ", slot, payload)
            return self._header.tobytes()

    def _transfer(self, operation: str, slot: int, payload: Sequence[Chunk]) -> None:
        offset = slot * self.slot_bytes
        local = [(self._header.ctypes.data, HEADER.size, 0)]
        remote = [(offset, HEADER.size, self.fd)]
        offset += HEADER.size
        for address, length in payload:
            local.append((address, length, 0))
            remote.append((offset, length, self.fd))
            offset += length
        agent = self._agent
        handle = None
        try:
            handle = agent.initialize_xfer(
                operation,
                agent.get_xfer_descs(local, "DRAM"),
                agent.get_xfer_descs(remote, "FILE"),
                agent.name,
            )
            state = agent.transfer(handle)
            while state == "PROC":
                time.sleep(POLL_S)
                state = agent.check_xfer_state(handle)
        except self._errors as exc:
            raise DiskError(f"{operation} of slot {slot} in {self.path}: {exc!r}") from exc
        finally:
            if handle is not None:
                agent.release_xfer_handle(handle)
        if state != "DONE":
            raise DiskError(f"{operation} of slot {slot} in {self.path}: NIXL reported {state}")
