"""A local InferenceCluster started the way ``tandem up --detach`` starts one, for the
soak and the fuzz: real processes under the real supervisor, stopped on exit."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from tandem.api.validate import load_inference_cluster
from tandem.runtime.launcher import detach, down
from tandem.runtime.plan import WORKER_MODULE
from tandem.runtime.state import ClusterState, cluster_dir, read_state


@contextlib.contextmanager
def running_cluster(
    doc: Mapping[str, Any], home: Path, *, worker_module: str = WORKER_MODULE
) -> Iterator[ClusterState]:
    """``doc`` (an InferenceCluster) up as local processes under ``home``; its state."""
    name = doc["metadata"]["name"]
    home.mkdir(parents=True, exist_ok=True)
    path = home / f"{name}.yaml"
    path.write_text(yaml.safe_dump(dict(doc)))
    lines: list[str] = []
    code = detach(path, load_inference_cluster(path), port=0, progress=lines.append,
                  home=home, timeout_s=600, worker_module=worker_module)  # fmt: skip
    try:
        if code != 0:
            raise RuntimeError(f"tandem up failed ({code}):\n" + "\n".join(lines[-20:]))
        state = read_state(cluster_dir(name, home))
        assert state is not None
        yield state
    finally:
        down(name, progress=lambda _: None, home=home)
