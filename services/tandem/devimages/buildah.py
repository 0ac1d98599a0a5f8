"""A thin shell around the ``buildah`` CLI (Debian's buildah 1.28), on a private store.

Every call names its own ``--root``/``--runroot`` under the build directory and sets
``TMPDIR`` there too (buildah keeps ``RUN --mount=type=cache`` folders and its temporary
files under it), so builds never touch the machine's default container storage and never
collide with another checkout's. Builds use chroot isolation: no daemon, no runtime, no
user namespaces -- what root on a plain VM can do.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tandem.devimages.errors import ImageBuildError
from tandem.devimages.mounts import release_transient_mounts

logger = logging.getLogger(__name__)

OUTPUT_TAIL_LINES = 25


class BuildahError(ImageBuildError):
    """A buildah command failed; the message ends with the tail of its output."""


@dataclass(frozen=True, slots=True)
class Buildah:
    """buildah on the store rooted at ``store`` (``store/root``, ``store/run``, ``store/tmp``)."""

    store: Path
    driver: str = "overlay"
    executable: str = "buildah"

    @property
    def tmpdir(self) -> Path:
        return self.store / "tmp"

    def _argv(self, args: Sequence[str]) -> list[str]:
        return [
            self.executable,
            "--root",
            str(self.store / "root"),
            "--runroot",
            str(self.store / "run"),
            "--storage-driver",
            self.driver,
            *args,
        ]

    def _env(self) -> dict[str, str]:
        self.tmpdir.mkdir(parents=True, exist_ok=True)
        return {**os.environ, "TMPDIR": str(self.tmpdir)}

    def call(self, *args: str, log: Path | None = None, check: bool = True) -> str:
        """Run ``buildah ARGS``; its stdout, or its whole output appended to ``log``."""
        argv = self._argv(args)
        logger.debug("buildah %s", " ".join(args))
        if log is None:
            captured = subprocess.run(
                argv, env=self._env(), capture_output=True, text=True, check=False
            )
            status, output = captured.returncode, captured.stdout
            failure_text = captured.stderr or captured.stdout
        else:
            log.parent.mkdir(parents=True, exist_ok=True)
            with log.open("a") as sink:
                sink.write(f"$ {' '.join(argv)}\n")
                sink.flush()
                status = subprocess.run(
                    argv, env=self._env(), stdout=sink, stderr=subprocess.STDOUT, check=False
                ).returncode
            output = ""
            failure_text = log.read_text(errors="replace")
        if check and status != 0:
            tail = "\n".join(failure_text.splitlines()[-OUTPUT_TAIL_LINES:])
            where = f" (full output: {log})" if log else ""
            raise BuildahError(f"buildah {args[0]} failed with status {status}{where}:\n{tail}")
        return output

    def bud(
        self,
        dockerfile: Path,
        context: Path,
        tag: str,
        build_args: Mapping[str, str],
        log: Path,
    ) -> None:
        """``buildah bud`` the Dockerfile as users would, with chroot isolation.

        ``--layers`` keeps each step's result as a cache keyed by the step and its inputs
        (a source change reuses the dependency layer); ``--pull-never``: every FROM is
        local; ``--network host``: pip reaches the package index from RUN steps.
        """
        args = ["bud", "--isolation", "chroot", "--layers", "--pull-never", "--network", "host"]
        for key, value in sorted(build_args.items()):
            args += ["--build-arg", f"{key}={value}"]
        self.call(*args, "--file", str(dockerfile), "--tag", tag, str(context), log=log)

    def push_oci_layout(self, image: str, layout: Path, log: Path) -> None:
        """Write ``image`` as an OCI image layout folder (gzip layers)."""
        shutil.rmtree(layout, ignore_errors=True)
        layout.parent.mkdir(parents=True, exist_ok=True)
        self.call("push", "--quiet", image, f"oci:{layout}", log=log)

    def image_id(self, image: str) -> str | None:
        """The image's ID in this store, or None when the store has no such image."""
        result = self.call("images", "--quiet", "--no-trunc", image, check=False).strip()
        return result.splitlines()[0].removeprefix("sha256:") if result else None

    def from_image(self, image: str) -> str:
        """A new working container of ``image`` (``oci-archive:FILE`` works too)."""
        return self.call("from", "--quiet", "--pull-never", image).strip()

    def run(
        self, container: str, argv: Sequence[str], user: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``argv`` in the container (chroot isolation), as the image's user or ``user``."""
        args = ["run", "--isolation", "chroot"]
        if user is not None:
            args += ["--user", user]
        return subprocess.run(
            self._argv([*args, container, "--", *argv]),
            env=self._env(),
            capture_output=True,
            text=True,
            check=False,
        )

    def remove_container(self, container: str) -> None:
        self.call("rm", container, check=False)

    def remove_image(self, image: str) -> None:
        self.call("rmi", image, check=False)

    def remove_leftovers(self) -> None:
        """What an interrupted build left in this store: mounts, then working containers."""
        release_transient_mounts(self.store)
        self.call("rm", "--all", check=False)
