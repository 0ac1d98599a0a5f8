"""``ensure_images``: build what is out of date, write the archives and their index.

Up to date means the index records, for that image, the fingerprint of its inputs as
they are now and an archive of the recorded size: then nothing runs but hashing. One
build at a time per build directory (a file lock), so parallel test sessions wait
instead of racing on the same store.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tandem.devimages import archive, base, cache
from tandem.devimages.buildah import Buildah
from tandem.devimages.catalog import (
    RECIPES,
    ImageRecipe,
    default_build_dir,
    find_checkout,
    prepare_pause_context,
    recipe,
)
from tandem.devimages.errors import ImageBuildError
from tandem.devimages.fingerprint import fingerprint

logger = logging.getLogger(__name__)

INDEX_FILE = "index.json"
INDEX_VERSION = 1
REQUIRED_TOOLS = ("buildah", "debootstrap")
HOST_PACKAGES_SCRIPT = "scripts/install-host-packages.sh"


@dataclass(frozen=True, slots=True)
class BuiltImage:
    """One image archive, importable with ``ctr -n k8s.io images import ARCHIVE``."""

    reference: str
    archive: Path
    size: int  # bytes of the archive
    digest: str  # manifest digest (what containerd lists as the image digest)
    inputs: str  # fingerprint of the Dockerfile, copied files and build args


def archive_path(build_dir: Path, spec: ImageRecipe) -> Path:
    return build_dir / f"{spec.name}.tar"


def index_path(build_dir: Path) -> Path:
    return build_dir / INDEX_FILE


def load_index(build_dir: Path) -> dict[str, BuiltImage]:
    """The images recorded in ``build_dir/index.json`` by reference (empty if none)."""
    path = index_path(build_dir)
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    if document.get("version") != INDEX_VERSION:
        return {}
    return {
        reference: BuiltImage(
            reference=reference,
            archive=build_dir / entry["archive"],
            size=entry["size"],
            digest=entry["digest"],
            inputs=entry["inputs"],
        )
        for reference, entry in document["images"].items()
    }


def _write_index(build_dir: Path, images: dict[str, BuiltImage]) -> None:
    entries: dict[str, Any] = {}
    for reference, image in sorted(images.items()):
        entry = asdict(image)
        del entry["reference"]
        entry["archive"] = image.archive.relative_to(build_dir).as_posix()
        entries[reference] = entry
    document = {"version": INDEX_VERSION, "images": entries}
    partial = index_path(build_dir).with_suffix(".json.partial")
    partial.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    partial.replace(index_path(build_dir))


def is_current(image: BuiltImage | None, inputs: str) -> bool:
    if image is None or image.inputs != inputs:
        return False
    try:
        return image.archive.stat().st_size == image.size
    except FileNotFoundError:
        return False


@contextmanager
def _locked(build_dir: Path) -> Iterator[None]:
    try:
        build_dir.mkdir(parents=True, exist_ok=True)
        lock = (build_dir / ".lock").open("w")
    except PermissionError as exc:
        raise ImageBuildError(f"cannot write {build_dir} ({exc.strerror}): run as root") from exc
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _check_host() -> None:
    if os.geteuid() != 0:
        raise ImageBuildError(
            "building images needs root (buildah with chroot isolation, debootstrap); "
            "run `make images` as root"
        )
    missing = [tool for tool in REQUIRED_TOOLS if shutil.which(tool) is None]
    if missing:
        raise ImageBuildError(
            f"missing {', '.join(missing)}: run {HOST_PACKAGES_SCRIPT} (or `make images`)"
        )


@dataclass(frozen=True, slots=True)
class _Builder:
    checkout: Path
    build_dir: Path
    buildah: Buildah

    def context_for(self, spec: ImageRecipe) -> Path:
        if not spec.prepared_context:
            return self.checkout
        context = self.build_dir / "context" / spec.name
        try:
            prepare_pause_context(self.checkout, context)
        except FileNotFoundError as exc:
            raise ImageBuildError(f"no gcc: run {HOST_PACKAGES_SCRIPT}") from exc
        except subprocess.CalledProcessError as exc:
            raise ImageBuildError(f"compiling images/pause.c failed:\n{exc.stderr}") from exc
        return context

    def build_args(self, spec: ImageRecipe) -> dict[str, str]:
        """BASE_IMAGE names the base by the hash of its recipe: no store lookup needed."""
        return {"BASE_IMAGE": base.current_recipe().reference} if spec.uses_base else {}

    def build(self, spec: ImageRecipe, context: Path, inputs: str) -> BuiltImage:
        log = self.build_dir / "logs" / f"{spec.name}.log"
        log.unlink(missing_ok=True)
        layout = self.build_dir / "layouts" / spec.name
        target = archive_path(self.build_dir, spec)
        if spec.uses_base:
            started = time.monotonic()
            reference = base.ensure_base(self.buildah, self.build_dir / "logs" / "base.log")
            logger.info("base %s ready in %.1f s", reference, time.monotonic() - started)
        logger.info("building %s from %s (log: %s)", spec.reference, spec.dockerfile, log)
        started = time.monotonic()
        self.buildah.bud(
            self.checkout / spec.dockerfile, context, spec.reference, self.build_args(spec), log
        )
        built = time.monotonic()
        self.buildah.push_oci_layout(spec.reference, layout, log)
        archive.write_archive(layout, spec.reference, target)
        shutil.rmtree(layout)  # the archive holds the same blobs
        logger.info(
            "%s: built in %.1f s, archived in %.1f s",
            spec.reference,
            built - started,
            time.monotonic() - built,
        )
        return _record(spec.reference, target, inputs)


def _record(reference: str, target: Path, inputs: str) -> BuiltImage:
    digest = archive.read_archive(target).digest
    return BuiltImage(reference, target, target.stat().st_size, digest, inputs)


def ensure_images(
    names: Sequence[str] | None = None,
    *,
    checkout: Path | None = None,
    build_dir: Path | None = None,
    force: bool = False,
) -> dict[str, BuiltImage]:
    """Build the named images (default: all) unless up to date; all recorded, by reference.

    Idempotent and cheap when nothing changed (hashing the inputs only). Raises
    ImageBuildError with an actionable message when a build cannot run or fails.
    """
    checkout = checkout or find_checkout()
    build_dir = build_dir or default_build_dir(checkout)
    specs = [recipe(n) for n in names] if names else list(RECIPES)
    builder = _Builder(checkout, build_dir, Buildah(build_dir / "store"))
    shared = cache.cache_dir()
    with _locked(build_dir):
        images = load_index(build_dir)
        cleaned = False
        for spec in specs:
            context = builder.context_for(spec)
            args = builder.build_args(spec)
            inputs = fingerprint(checkout / spec.dockerfile, context, args)
            if not force and is_current(images.get(spec.reference), inputs):
                logger.info("%s is up to date", spec.reference)
                continue
            target = archive_path(build_dir, spec)
            if not force and cache.restore(shared, spec.name, inputs, target):
                logger.info("%s: unchanged, taken from %s", spec.reference, shared)
                images[spec.reference] = _record(spec.reference, target, inputs)
                _write_index(build_dir, images)
                continue
            _check_host()
            if not cleaned:  # every container in the store is ours, and we hold the lock
                builder.buildah.remove_leftovers()
                cleaned = True
            images[spec.reference] = builder.build(spec, context, inputs)
            _write_index(build_dir, images)
            cache.remember(shared, spec.name, inputs, target)
        return images
