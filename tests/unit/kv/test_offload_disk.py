"""The disk tier against real files through NIXL's POSIX backend: slots written and read
back, block integrity (a flipped byte, a stale slot, a torn header are each caught), and a
write the kernel refuses surfacing as ``DiskError``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tandem.kv.offload.disk import DiskFile
from tandem.kv.offload.records import (
    HEADER,
    Damage,
    check_header,
    check_payload,
    compute_digest,
    pack_header,
)

pytest.importorskip("nixl._api")

PAYLOAD = 4096


def chunks_of(array: np.ndarray) -> list[tuple[int, int]]:
    """Two chunks per row, as a block's layers are."""
    half = array.shape[1] // 2
    return [(int(array[0].ctypes.data), half), (int(array[0].ctypes.data) + half, half)]


def flip_bit(fd: int, offset: int) -> None:
    os.pwrite(fd, bytes([os.pread(fd, 1, offset)[0] ^ 0x01]), offset)


def test_slots_round_trip_through_nixl_and_each_keeps_its_block(tmp_path: Path) -> None:
    source = np.random.default_rng(0).integers(0, 256, (1, PAYLOAD), dtype=np.uint8)
    target = np.zeros((1, PAYLOAD), dtype=np.uint8)
    disk = DiskFile(tmp_path, 4, PAYLOAD, [source.data.cast("B"), target.data.cast("B")])
    assert not any(tmp_path.iterdir())  # unlinked: nothing left behind, however we exit
    digest = compute_digest([source.data.cast("B")])
    disk.write(2, pack_header(77, PAYLOAD, digest), chunks_of(source))
    assert os.fstat(disk.fd).st_size == 3 * (HEADER.size + PAYLOAD)  # sparse, grows
    header = disk.read(2, chunks_of(target))
    assert check_header(header, 77, PAYLOAD, digest) is None
    assert check_payload([target.data.cast("B")], digest) is None
    assert np.array_equal(source, target)
    assert check_header(header, 78, PAYLOAD, digest) is Damage.STALE
    # Slot 1 was never written: its zeros are no header.
    assert check_header(disk.read(1, chunks_of(target)), 77, PAYLOAD, digest) is Damage.TORN

    flip_bit(disk.fd, 2 * (HEADER.size + PAYLOAD) + HEADER.size + 123)  # behind NIXL's back
    header = disk.read(2, chunks_of(target))
    assert check_header(header, 77, PAYLOAD, digest) is None
    assert check_payload([target.data.cast("B")], digest) is Damage.CORRUPT


REFUSED_WRITE = """
import json, resource, signal, sys
from pathlib import Path
import numpy as np
from tandem.kv.offload.disk import DiskError, DiskFile
from tandem.kv.offload.records import HEADER
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), resource.RLIM_INFINITY))
buffer = np.ones(4096, dtype=np.uint8)
disk = DiskFile(Path(sys.argv[1]), 8, 4096, [buffer.data.cast("B")])
outcomes = []
for slot in range(3):
    try:
        disk.write(slot, bytes(HEADER.size), [(buffer.ctypes.data, 4096)])
        outcomes.append("ok")
    except DiskError:
        outcomes.append("refused")
print(json.dumps(outcomes))
"""


def test_a_write_past_the_space_left_is_a_disk_error(tmp_path: Path) -> None:
    """A file-size limit in a child process makes the kernel refuse the write (EFBIG),
    as a full disk would (ENOSPC)."""
    done = subprocess.run(
        [sys.executable, "-c", REFUSED_WRITE, str(tmp_path), str(2 * (HEADER.size + 4096))],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["ok", "ok", "refused"]
