"""Tandem's own container images, built from ``images/*.Dockerfile`` with no registry.

``make images`` (or ``python -m tandem.devimages build``) builds each image with buildah
(chroot isolation, no daemon) exactly from its Dockerfile, the Tandem image on a Debian +
Python base bootstrapped from Debian packages, and writes OCI archives that
``ctr -n k8s.io images import`` names correctly, plus an index tests read:

    images = ensure_images()  # fast when nothing changed
    images[TANDEM_IMAGE].archive  # build/images/tandem.tar
    images[PAUSE_IMAGE].digest  # sha256:... of the manifest
"""

from tandem.devimages.archive import ArchiveInfo, read_archive
from tandem.devimages.build import BuiltImage, ensure_images, load_index
from tandem.devimages.buildah import Buildah
from tandem.devimages.catalog import (
    IMAGE_USER,
    PAUSE_IMAGE,
    RECIPES,
    TANDEM_IMAGE,
    TANDEM_REPOSITORY,
    TANDEM_TAG,
    default_build_dir,
    find_checkout,
)
from tandem.devimages.errors import ImageBuildError

__all__ = [
    "IMAGE_USER",
    "PAUSE_IMAGE",
    "RECIPES",
    "TANDEM_IMAGE",
    "TANDEM_REPOSITORY",
    "TANDEM_TAG",
    "ArchiveInfo",
    "Buildah",
    "BuiltImage",
    "ImageBuildError",
    "default_build_dir",
    "ensure_images",
    "find_checkout",
    "load_index",
    "read_archive",
]
