"""The machine-wide archive cache: an unchanged image is a link away for a fresh checkout,
a changed one is not found, and only the newest archive of an image is kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from tandem.devimages import cache


def test_an_archive_is_found_only_under_the_inputs_it_was_built_from(tmp_path: Path) -> None:
    shared = tmp_path / "cache"
    built = tmp_path / "one" / "tandem.tar"
    built.parent.mkdir()
    built.write_bytes(b"archive v1")
    cache.remember(shared, "tandem", "inputs-1", built)
    target = tmp_path / "two" / "tandem.tar"
    target.parent.mkdir()
    assert not cache.restore(shared, "tandem", "inputs-2", target)
    assert not target.exists()
    assert cache.restore(shared, "tandem", "inputs-1", target)
    assert target.read_bytes() == b"archive v1"
    assert target.stat().st_ino == built.stat().st_ino  # a hard link on one filesystem


def test_only_the_newest_archive_of_an_image_is_kept(tmp_path: Path) -> None:
    shared = tmp_path / "cache"
    for version in (1, 2):
        built = tmp_path / f"tandem-{version}.tar"
        built.write_bytes(f"archive v{version}".encode())
        cache.remember(shared, "tandem", f"inputs-{version}", built)
    pause = tmp_path / "pause.tar"
    pause.write_bytes(b"pause")
    cache.remember(shared, "pause", "p", pause)
    assert sorted(p.name for p in shared.iterdir()) == [
        "pause-p.tar",
        "tandem-inputs-2.tar",
    ]


def test_the_cache_follows_its_environment_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path))
    assert cache.cache_dir() == tmp_path / "images"
    monkeypatch.delenv(cache.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_dir() == tmp_path / "xdg" / "tandem" / "images"


def test_an_unwritable_cache_is_skipped(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    built = tmp_path / "tandem.tar"
    built.write_bytes(b"archive")
    cache.remember(blocker / "images", "tandem", "i", built)  # no exception
    assert built.read_bytes() == b"archive"
