"""The local stand-in for ``python:3.11-slim``: Debian bookworm + Python, from Debian packages.

No container registry is reachable here, so the Tandem image's ``BASE_IMAGE`` is
bootstrapped with ``debootstrap --variant=minbase`` from the Debian mirror this machine's
apt is configured with, straight into a buildah working container, trimmed (apt lists
and caches, docs, man pages, locales, Python's test suite) and committed as
``localhost/tandem-base:bookworm-<key>``. The key hashes every input of the recipe, so
the image is built once and reused until one changes.

The base trusts what this machine trusts: the host's CA bundle replaces the package's,
and ``PIP_CERT`` points pip (which otherwise reads only its own certifi bundle) at it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tandem.devimages.buildah import Buildah
from tandem.devimages.errors import ImageBuildError
from tandem.devimages.mounts import release_transient_mounts

logger = logging.getLogger(__name__)

SUITE = "bookworm"  # Python 3.11, the project's floor; the release the host packages are from
PACKAGES = ("python3", "python3-venv", "ca-certificates")
TRIMMED = (
    "var/cache/apt",
    "var/lib/apt/lists",
    "var/log",
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
    "usr/lib/python3.11/test",
    "dev",  # the runtime mounts its own /dev; device nodes do not belong in a layer
)
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
    "PIP_CERT": str(CA_BUNDLE),
}
REPOSITORY = "localhost/tandem-base"
WORK_CONTAINER = "tandem-base-bootstrap"
APT_SOURCES = (Path("/etc/apt/sources.list"), Path("/etc/apt/sources.list.d"))


class BaseImageError(ImageBuildError):
    """The base image cannot be bootstrapped; the message says why."""


def debian_mirror(source_texts: Iterable[str], suite: str = SUITE) -> str | None:
    """The first URI apt fetches ``suite`` from, in one-line or deb822 source files."""
    for text in source_texts:
        for stanza in text.split("\n\n"):
            fields: dict[str, str] = {}
            for line in stanza.splitlines():
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                words = line.split()
                if words[0] == "deb":
                    uri_suite = [w for w in words[1:] if not w.startswith("[")]
                    if len(uri_suite) >= 2 and uri_suite[1] == suite:
                        return uri_suite[0]
                elif ":" in words[0]:
                    key, _, value = line.partition(":")
                    fields[key.strip().lower()] = value.strip()
            types = fields.get("types", "").split()
            if "deb" in types and suite in fields.get("suites", "").split():
                return fields.get("uris", "").split()[0] if fields.get("uris") else None
    return None


def configured_mirror() -> str:
    texts: list[str] = []
    for source in APT_SOURCES:
        files = sorted(source.glob("*.list")) + sorted(source.glob("*.sources"))
        for path in [source] if source.is_file() else files:
            texts.append(path.read_text())
    mirror = debian_mirror(texts)
    if mirror is None:
        raise BaseImageError(
            f"no apt source for Debian {SUITE} in /etc/apt/sources.list*: the base image is "
            "bootstrapped from the mirror apt uses"
        )
    return mirror


@dataclass(frozen=True, slots=True)
class BaseRecipe:
    mirror: str
    ca_bundle_sha256: str

    @property
    def key(self) -> str:
        document = {
            "suite": SUITE,
            "variant": "minbase",
            "packages": PACKAGES,
            "trimmed": TRIMMED,
            "env": ENV,
            "mirror": self.mirror,
            "ca_bundle": self.ca_bundle_sha256,
        }
        return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()[:16]

    @property
    def reference(self) -> str:
        return f"{REPOSITORY}:{SUITE}-{self.key}"


def current_recipe() -> BaseRecipe:
    return BaseRecipe(configured_mirror(), hashlib.sha256(CA_BUNDLE.read_bytes()).hexdigest())


def ensure_base(buildah: Buildah, log: Path) -> str:
    """The base image's reference, bootstrapping it first unless the store has it."""
    recipe = current_recipe()
    if buildah.image_id(recipe.reference) is not None:
        return recipe.reference
    logger.info("bootstrapping %s from %s (log: %s)", recipe.reference, recipe.mirror, log)
    buildah.remove_leftovers()  # a crashed bootstrap's container holds WORK_CONTAINER
    container = buildah.call("from", "--name", WORK_CONTAINER, "scratch").strip()
    try:
        rootfs = Path(buildah.call("mount", container).strip())
        _bootstrap(rootfs, recipe.mirror, log)
        buildah.call("umount", container)
        config = [arg for k, v in ENV.items() for arg in ("--env", f"{k}={v}")]
        buildah.call("config", *config, "--cmd", '["python3"]', container)
        buildah.call("commit", "--quiet", "--rm", container, recipe.reference, log=log)
    except BaseException:
        release_transient_mounts(buildah.store)
        buildah.remove_container(container)
        raise
    _remove_stale_bases(buildah, keep=recipe.reference)
    return recipe.reference


def _bootstrap(rootfs: Path, mirror: str, log: Path) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    argv = [
        "debootstrap",
        "--variant=minbase",
        f"--include={','.join(PACKAGES)}",
        SUITE,
        str(rootfs),
        mirror,
    ]
    with log.open("a") as sink:
        sink.write(f"$ {' '.join(argv)}\n")
        sink.flush()
        result = subprocess.run(argv, stdout=sink, stderr=subprocess.STDOUT, check=False)
    if result.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        raise BaseImageError(f"debootstrap failed with status {result.returncode} ({log}):\n{tail}")
    for relative in TRIMMED:
        folder = rootfs / relative
        for entry in folder.iterdir() if folder.is_dir() else ():
            subprocess.run(["rm", "-rf", "--one-file-system", str(entry)], check=True)
    (rootfs / CA_BUNDLE.relative_to("/")).write_bytes(CA_BUNDLE.read_bytes())


def _remove_stale_bases(buildah: Buildah, keep: str) -> None:
    listed = buildah.call("images", "--format", "{{.Name}}:{{.Tag}}", REPOSITORY, check=False)
    for reference in listed.split():
        if reference != keep:
            buildah.remove_image(reference)
