"""OCI image layout folder -> one archive that ``ctr images import`` names correctly.

containerd 1.6's importer (``ctr -n k8s.io images import FILE``, and the CRI's import)
names each image of an OCI archive's ``index.json`` by its ``io.containerd.image.name``
annotation; only without one does it fall back to ``org.opencontainers.image.ref.name``
run through ctr's ``--base-name`` prefix check, which drops a full reference. buildah's
``oci:`` output carries only the OCI annotation, so the index is rewritten here the way
Docker's exporter writes it: the full reference in the containerd annotation, the tag in
the OCI one.
"""

from __future__ import annotations

import io
import json
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CONTAINERD_NAME = "io.containerd.image.name"
OCI_REF_NAME = "org.opencontainers.image.ref.name"
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"


class ArchiveError(ValueError):
    """An OCI layout or archive is not what an importer needs; the message says what."""


@dataclass(frozen=True, slots=True)
class ArchiveInfo:
    """What an importer reads from an archive: names, manifest digest, image config."""

    names: tuple[str, ...]  # io.containerd.image.name of each manifest
    tags: tuple[str, ...]  # org.opencontainers.image.ref.name of each manifest
    digest: str  # the (first) manifest's digest: the image digest containerd reports
    config: dict[str, Any]  # the image config blob (architecture, os, config.User, ...)
    layers: tuple[str, ...]  # archive member of each layer blob, base first


def tag_of(reference: str) -> str:
    """``registry.k8s.io/pause:3.10`` -> ``3.10`` (references here always carry a tag)."""
    last = reference.rsplit("/", 1)[-1]
    if ":" not in last:
        raise ArchiveError(f"image reference {reference!r} has no tag")
    return last.rsplit(":", 1)[1]


def named_index(index: dict[str, Any], reference: str) -> dict[str, Any]:
    """``index`` (one image manifest) with both name annotations set to ``reference``."""
    manifests = index.get("manifests") or []
    if len(manifests) != 1 or manifests[0].get("mediaType") != MANIFEST_MEDIA_TYPE:
        raise ArchiveError(f"expected one image manifest in the layout's index, got {manifests}")
    manifest = dict(manifests[0])
    manifest["annotations"] = {CONTAINERD_NAME: reference, OCI_REF_NAME: tag_of(reference)}
    return {**index, "manifests": [manifest]}


def write_archive(layout: Path, reference: str, archive: Path) -> None:
    """Tar ``layout`` into ``archive`` (atomically) with ``reference`` in its index."""
    index = named_index(json.loads((layout / "index.json").read_text()), reference)
    index_bytes = json.dumps(index, separators=(",", ":")).encode()
    partial = archive.with_name(archive.name + ".partial")
    with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as tar:
        tar.add(layout / "oci-layout", arcname="oci-layout")
        info = tarfile.TarInfo("index.json")
        info.size = len(index_bytes)
        info.mode = 0o644
        info.mtime = int((layout / "index.json").stat().st_mtime)
        tar.addfile(info, io.BytesIO(index_bytes))
        for blob in sorted((layout / "blobs").rglob("*")):
            if blob.is_file():
                tar.add(blob, arcname=blob.relative_to(layout).as_posix())
    partial.replace(archive)


def read_archive(archive: Path) -> ArchiveInfo:
    """Parse ``archive`` as containerd's importer would: layout, index, manifest, config."""
    try:
        with tarfile.open(archive) as tar:
            layout = json.loads(_member(tar, "oci-layout"))
            if layout.get("imageLayoutVersion") != "1.0.0":
                raise ArchiveError(f"oci-layout {layout} is not version 1.0.0")
            index = json.loads(_member(tar, "index.json"))
            manifests = index.get("manifests") or []
            if not manifests:
                raise ArchiveError("index.json lists no manifest")
            digest = manifests[0]["digest"]
            manifest = json.loads(_member(tar, _blob_path(digest)))
            config = json.loads(_member(tar, _blob_path(manifest["config"]["digest"])))
            layers = tuple(_blob_path(layer["digest"]) for layer in manifest["layers"])
            for layer in layers:
                _member_info(tar, layer)
    except ArchiveError as exc:
        raise ArchiveError(f"{archive}: {exc}") from None
    annotations = [m.get("annotations") or {} for m in manifests]
    return ArchiveInfo(
        names=tuple(a.get(CONTAINERD_NAME, "") for a in annotations),
        tags=tuple(a.get(OCI_REF_NAME, "") for a in annotations),
        digest=digest,
        config=config,
        layers=layers,
    )


def _blob_path(digest: str) -> str:
    algorithm, _, encoded = digest.partition(":")
    return f"blobs/{algorithm}/{encoded}"


def _member_info(tar: tarfile.TarFile, name: str) -> tarfile.TarInfo:
    try:
        return tar.getmember(name)
    except KeyError:
        raise ArchiveError(f"no {name} in the archive") from None


def _member(tar: tarfile.TarFile, name: str) -> bytes:
    extracted = tar.extractfile(_member_info(tar, name))
    if extracted is None:
        raise ArchiveError(f"{name} is not a regular file")
    return extracted.read()
