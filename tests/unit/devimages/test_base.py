"""The base image's inputs: the apt mirror it bootstraps from, its key, crash leftovers."""

from __future__ import annotations

from pathlib import Path

from tandem.devimages.base import SUITE, BaseRecipe, debian_mirror
from tandem.devimages.mounts import transient_mounts

DEB822 = """\
Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
"""

ONE_LINE = """\
# deb http://old.example/debian bookworm main
deb [arch=amd64 signed-by=/k.gpg] https://packages.example/apt cloud-sdk-bookworm main
deb http://mirror.example/debian bookworm main contrib
"""


def test_mirror_from_deb822_sources() -> None:
    assert debian_mirror([DEB822]) == "http://deb.debian.org/debian"


def test_mirror_from_one_line_sources_skips_comments_options_and_other_suites() -> None:
    assert debian_mirror([ONE_LINE]) == "http://mirror.example/debian"


def test_security_only_sources_name_no_mirror() -> None:
    security = DEB822.split("\n\n")[1]
    assert debian_mirror([security]) is None
    assert debian_mirror([]) is None


def test_the_first_file_that_has_the_suite_wins() -> None:
    assert debian_mirror(["", ONE_LINE, DEB822], SUITE) == "http://mirror.example/debian"


def test_the_key_changes_with_every_input() -> None:
    keys = {
        BaseRecipe("http://a/debian", "00").key,
        BaseRecipe("http://b/debian", "00").key,
        BaseRecipe("http://a/debian", "01").key,
    }
    assert len(keys) == 3
    recipe = BaseRecipe("http://a/debian", "00")
    assert recipe.reference == f"localhost/tandem-base:{SUITE}-{recipe.key}"


MOUNTINFO = """\
22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
90 22 0:5 / /b/store/root/overlay/x/merged rw - overlay overlay rw
91 90 0:21 / /b/store/root/overlay/x/merged/proc rw - proc proc rw
92 90 0:22 / /b/store/root/overlay/x/merged/sys rw - sysfs sysfs rw
93 91 0:23 / /b/store/root/overlay/x/merged/proc/sys/fs/binfmt_misc rw - binfmt_misc b rw
94 22 0:24 / /other/proc rw - proc proc rw
95 90 0:25 / /b/store/root/overlay/x/merged/dev/pts rw - devpts devpts rw
"""


def test_transient_mounts_are_debootstraps_kinds_under_the_store_deepest_first() -> None:
    found = transient_mounts(Path("/b/store"), MOUNTINFO)
    merged = Path("/b/store/root/overlay/x/merged")
    assert found[0] == merged / "dev" / "pts"
    assert set(found) == {merged / "proc", merged / "sys", merged / "dev" / "pts"}
