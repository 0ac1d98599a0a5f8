"""The archive containerd imports: index annotations, and reading it back."""

from __future__ import annotations

import hashlib
import json
import tarfile
from pathlib import Path

import pytest

from tandem.devimages.archive import (
    CONTAINERD_NAME,
    MANIFEST_MEDIA_TYPE,
    OCI_REF_NAME,
    ArchiveError,
    named_index,
    read_archive,
    tag_of,
    write_archive,
)


def _blob(layout: Path, data: bytes) -> dict[str, object]:
    digest = hashlib.sha256(data).hexdigest()
    path = layout / "blobs" / "sha256" / digest
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def _layout(tmp_path: Path) -> tuple[Path, str]:
    """An OCI layout as `buildah push oci:DIR` writes it: OCI ref name only."""
    layout = tmp_path / "layout"
    layer = _blob(layout, b"layer bytes")
    config = _blob(layout, json.dumps({"architecture": "amd64", "os": "linux"}).encode())
    manifest = {"schemaVersion": 2, "config": config, "layers": [layer]}
    manifest_desc = _blob(layout, json.dumps(manifest).encode())
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": MANIFEST_MEDIA_TYPE,
                **manifest_desc,
                "annotations": {OCI_REF_NAME: "tandem.local/tandem:dev"},
            }
        ],
    }
    (layout / "index.json").write_text(json.dumps(index))
    return layout, str(manifest_desc["digest"])


@pytest.mark.parametrize(
    ("reference", "tag"),
    [
        ("registry.k8s.io/pause:3.10", "3.10"),
        ("localhost:5000/a/b:dev", "dev"),
        ("tandem.local/tandem:dev", "dev"),
    ],
)
def test_tag_of(reference: str, tag: str) -> None:
    assert tag_of(reference) == tag


def test_a_reference_without_tag_is_refused() -> None:
    with pytest.raises(ArchiveError, match="no tag"):
        tag_of("localhost:5000/a/b")


def test_the_index_carries_the_full_name_for_containerd_and_the_tag_for_oci(
    tmp_path: Path,
) -> None:
    layout, digest = _layout(tmp_path)
    archive = tmp_path / "image.tar"
    write_archive(layout, "registry.k8s.io/pause:3.10", archive)
    info = read_archive(archive)
    assert info.names == ("registry.k8s.io/pause:3.10",)
    assert info.tags == ("3.10",)
    assert info.digest == digest
    assert info.config["architecture"] == "amd64"
    with tarfile.open(archive) as tar:
        names = {m.name for m in tar.getmembers()}
    blobs = {p.relative_to(layout).as_posix() for p in (layout / "blobs").rglob("*") if p.is_file()}
    assert names == {"oci-layout", "index.json", *blobs}
    assert not (tmp_path / "image.tar.partial").exists()


def test_an_index_with_other_than_one_image_manifest_is_refused() -> None:
    with pytest.raises(ArchiveError, match="one image manifest"):
        named_index({"manifests": []}, "a/b:c")
    nested = {"manifests": [{"mediaType": "application/vnd.oci.image.index.v1+json"}]}
    with pytest.raises(ArchiveError, match="one image manifest"):
        named_index(nested, "a/b:c")


def test_named_index_keeps_the_descriptor(tmp_path: Path) -> None:
    layout, digest = _layout(tmp_path)
    index = named_index(json.loads((layout / "index.json").read_text()), "a.b/c:d")
    (manifest,) = index["manifests"]
    assert manifest["digest"] == digest
    assert manifest["annotations"] == {CONTAINERD_NAME: "a.b/c:d", OCI_REF_NAME: "d"}


def test_an_archive_missing_a_layer_is_refused(tmp_path: Path) -> None:
    layout, _ = _layout(tmp_path)
    archive = tmp_path / "image.tar"
    write_archive(layout, "a.b/c:d", archive)
    broken = tmp_path / "broken.tar"
    with tarfile.open(archive) as source, tarfile.open(broken, "w") as target:
        for member in source.getmembers():
            data = source.extractfile(member)
            if member.size != len(b"layer bytes"):
                target.addfile(member, data)
    with pytest.raises(ArchiveError, match=r"broken.tar: no blobs/sha256/"):
        read_archive(broken)
