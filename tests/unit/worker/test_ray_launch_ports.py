"""Every port ``ray start`` opens for a group's node lies in its block, each once, the rank
link's apart from Ray's: the block is what the NetworkPolicy opens (pure)."""

from __future__ import annotations

from tandem.worker.ray_launch import RayPorts, build_ray_start_argv


def _ports(argv: list[str]) -> dict[str, int]:
    return {
        flag: int(value)
        for flag, _, value in (arg.partition("=") for arg in argv)
        if flag.endswith("-port") or flag == "--port"
    }


def test_every_port_of_a_node_lies_in_the_block_once() -> None:
    ports = RayPorts(21000)
    head = _ports(build_ray_start_argv("10.0.0.1", ports, head=None))
    follower = _ports(build_ray_start_argv("10.0.0.2", ports, head="10.0.0.1:21000"))
    assert head["--port"] == ports.gcs == 21000
    assert "--port" not in follower and "--ray-client-server-port" not in follower
    assert set(follower) < set(head)
    singles = [
        v for flag, v in head.items() if flag not in ("--min-worker-port", "--max-worker-port")
    ]
    assert len(set(singles)) == len(singles) == 8
    assert ports.rank_link not in singles and ports.rank_link not in ports.workers
    assert (head["--min-worker-port"], head["--max-worker-port"]) == (21100, 21199)
    assert all(v in ports.block for v in head.values())
    assert ports.block == range(21000, 21200) and ports.rank_link in ports.block
    assert follower["--node-manager-port"] == ports.node_manager
