"""Reference engine options that come from an InferenceCluster pool's own spec fields
rather than from its ``engineOptions``: ``kvCache.offload``. Rendered the same way by the
operator (the worker document) and the local runtime (the worker's command line)."""

from __future__ import annotations

from tandem.api.v1alpha1 import KvOffloadSpec


def render_offload_options(offload: KvOffloadSpec) -> dict[str, object]:
    """The ``offload_*`` engine options of ``offload`` (none when it is off)."""
    if not offload.enabled:
        return {}
    return {
        "offload_host_bytes": offload.host_bytes,
        "offload_disk_bytes": offload.disk_bytes,
        "offload_disk_path": offload.disk_path,
    }
