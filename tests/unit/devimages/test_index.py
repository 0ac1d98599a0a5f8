"""The index tests read, and when an image counts as up to date."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tandem.devimages import cache
from tandem.devimages.build import (
    BuiltImage,
    ImageBuildError,
    _write_index,
    ensure_images,
    is_current,
    load_index,
)


def _image(build_dir: Path, inputs: str = "abc") -> BuiltImage:
    archive = build_dir / "tandem.tar"
    archive.write_bytes(b"x" * 10)
    return BuiltImage("tandem.local/tandem:dev", archive, 10, "sha256:00", inputs)


def test_index_round_trips_with_archive_paths_relative_to_it(tmp_path: Path) -> None:
    image = _image(tmp_path)
    _write_index(tmp_path, {image.reference: image})
    document = json.loads((tmp_path / "index.json").read_text())
    assert document["images"]["tandem.local/tandem:dev"] == {
        "archive": "tandem.tar",
        "size": 10,
        "digest": "sha256:00",
        "inputs": "abc",
    }
    assert load_index(tmp_path) == {image.reference: image}


def test_no_index_or_another_version_is_empty(tmp_path: Path) -> None:
    assert load_index(tmp_path) == {}
    (tmp_path / "index.json").write_text('{"version": 0, "images": {}}')
    assert load_index(tmp_path) == {}


def test_current_means_same_inputs_and_the_archive_as_recorded(tmp_path: Path) -> None:
    image = _image(tmp_path)
    assert is_current(image, "abc")
    assert not is_current(image, "abd")
    assert not is_current(None, "abc")
    image.archive.write_bytes(b"x" * 9)  # a partial copy
    assert not is_current(image, "abc")
    image.archive.unlink()
    assert not is_current(image, "abc")


def test_building_without_root_says_so_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    # An empty machine-wide cache: a cached archive would need no build, and so no root.
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "cache"))
    with pytest.raises(ImageBuildError, match=r"needs root .* run `make images` as root"):
        ensure_images(["pause"], build_dir=tmp_path)
    assert load_index(tmp_path) == {}


def test_an_unknown_image_name_lists_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(KeyError, match="known: pause, tandem"):
        ensure_images(["paus"], build_dir=tmp_path)
