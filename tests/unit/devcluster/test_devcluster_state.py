"""State file, layout and CLI wiring: no processes, no cluster."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from tandem.cli import devcluster as cli
from tandem.devcluster.layout import StateLayout, default_state_dir
from tandem.devcluster.processes import ProcessRecord
from tandem.devcluster.state import ClusterState, load_state, save_state


def test_state_round_trips(tmp_path: Path) -> None:
    layout = StateLayout(tmp_path)
    assert load_state(layout) is None
    state = ClusterState(
        api_url="https://127.0.0.1:6443",
        kubeconfig=str(tmp_path / "kubeconfig"),
        profile="default",
        with_lws=False,
        started_at=1.0,
        processes=(ProcessRecord(name="etcd", pid=42, start_ticks=7, log="/l/etcd.log"),),
    )
    save_state(layout, state)
    assert load_state(layout) == state


def test_layout_owns_only_entries_inside_its_root(tmp_path: Path) -> None:
    layout = StateLayout(tmp_path)
    owned = layout.owned_entries()
    assert tmp_path not in owned
    assert all(entry.parent == tmp_path for entry in owned)


@pytest.mark.parametrize(
    ("tandem_home", "expected"),
    [("/opt/th", Path("/opt/th/devcluster")), (None, Path.home() / ".tandem" / "devcluster")],
)
def test_default_state_dir(
    monkeypatch: pytest.MonkeyPatch, tandem_home: str | None, expected: Path
) -> None:
    if tandem_home is None:
        monkeypatch.delenv("TANDEM_HOME", raising=False)
    else:
        monkeypatch.setenv("TANDEM_HOME", tandem_home)
    assert default_state_dir() == expected


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def test_cli_parses_up_with_options(tmp_path: Path) -> None:
    args = _parse(
        "dev", "cluster", "up", "--nodes", "cpu", "--kubeconfig", "kc", "--with-lws",
        "--state-dir", str(tmp_path),
    )  # fmt: skip
    assert args.handler is cli.cmd_up
    assert (args.nodes, args.kubeconfig, args.with_lws) == ("cpu", Path("kc"), True)
    assert args.state_dir == tmp_path


def test_cli_rejects_unknown_profiles() -> None:
    with pytest.raises(SystemExit):
        _parse("dev", "cluster", "up", "--nodes", "gb300")


def test_status_and_down_without_a_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.cmd_status(_parse("dev", "cluster", "status", "--state-dir", str(tmp_path))) == 3
    assert cli.cmd_down(_parse("dev", "cluster", "down", "--state-dir", str(tmp_path))) == 0
    assert "no dev cluster recorded" in capsys.readouterr().out
