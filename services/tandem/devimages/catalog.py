"""The images ``make images`` builds, their local references, and where files land.

References: the Tandem image is ``tandem.local/tandem:dev`` (the ``.local`` registry host
exists nowhere, so nothing ever tries to pull it); the pause image takes the exact name
containerd's CRI starts every pod sandbox from, ``registry.k8s.io/pause:3.10``.
Archives land in ``build/images/<name>.tar`` of the checkout, listed in
``build/images/index.json``.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

TANDEM_REPOSITORY = "tandem.local/tandem"
TANDEM_TAG = "dev"
TANDEM_IMAGE = f"{TANDEM_REPOSITORY}:{TANDEM_TAG}"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
IMAGE_USER = "65532:65532"  # the uid operator-rendered pods and the chart run as

DOCKERFILE_MARKER = Path("images") / "tandem.Dockerfile"


class CheckoutNotFoundError(RuntimeError):
    """Images are built from a source checkout; this process does not run from one."""


@dataclass(frozen=True, slots=True)
class ImageRecipe:
    """One image: its archive name, reference, Dockerfile and build context."""

    name: str
    reference: str
    dockerfile: Path  # relative to the checkout
    uses_base: bool  # takes BASE_IMAGE (the locally bootstrapped Debian + Python)
    prepared_context: bool  # context is a folder the builder fills, not the checkout


RECIPES: tuple[ImageRecipe, ...] = (
    ImageRecipe(
        name="pause",
        reference=PAUSE_IMAGE,
        dockerfile=Path("images/pause.Dockerfile"),
        uses_base=False,
        prepared_context=True,
    ),
    ImageRecipe(
        name="tandem",
        reference=TANDEM_IMAGE,
        dockerfile=Path("images/tandem.Dockerfile"),
        uses_base=True,
        prepared_context=False,
    ),
)


def recipe(name: str) -> ImageRecipe:
    for candidate in RECIPES:
        if candidate.name == name:
            return candidate
    known = ", ".join(r.name for r in RECIPES)
    raise KeyError(f"no image named {name!r} (known: {known})")


def find_checkout(start: Path | None = None) -> Path:
    """The source checkout this package runs from (editable installs)."""
    here = (start or Path(__file__)).resolve()
    for parent in here.parents:
        if (parent / DOCKERFILE_MARKER).is_file():
            return parent
    raise CheckoutNotFoundError(
        f"no {DOCKERFILE_MARKER} above {here}: images are built from a Tandem source "
        "checkout (`make images` there)"
    )


def default_build_dir(checkout: Path) -> Path:
    return checkout / "build" / "images"


def prepare_pause_context(checkout: Path, context: Path) -> None:
    """Compile images/pause.c into ``context/pause``: static, stripped, no libc needed."""
    context.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            "gcc",
            "-static",
            "-Os",
            "-s",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-o",
            str(context / "pause"),
            str(checkout / "images" / "pause.c"),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
