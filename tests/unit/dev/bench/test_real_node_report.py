"""The real-node benchmark's report: every figure the journey wrote lands in its row."""

from __future__ import annotations

from tandem_dev.bench.real_node import render_table

FIGURES = {
    "journey_wall_s": 412.3,
    "frontend_create_to_ready_s": 6.04,
    "prefill_create_to_ready_s": 9.51,
    "decode_create_to_ready_s": 9.77,
    "scale_and_kill_requests_answered": 41,
    "upgrade_requests_answered": 17,
    "node_daemons_rss_mib": {"kubelet": 61, "containerd": 38},
    "pods_rss_mib": 911,
    "network_policy_enforced": False,
    "ray_group_create_to_ready_s": 31.0,
    "ray_group_follower_kill_to_ready_s": 39.7,
    "ray_group_leader_kill_to_ready_s": 38.7,
    "ray_group_follower_kill_prefills_failed_over": 2.0,
    "ray_group_leader_kill_prefills_failed_over": 3.0,
    "ray_group_kills_requests_answered": 403,
    "ray_group_follower_kill_to_router_stopped_s": 0.25,
    "ray_group_leader_kill_to_router_stopped_s": 0.08,
}


def test_every_figure_has_its_row() -> None:
    table = render_table(
        FIGURES,
        {"tandem.local/tandem:dev": 390768640, "registry.k8s.io/pause:3.10": 337920},
        {"images_s": 188.6, "kubelet_s": 301.2, "journey_pytest_s": 530.0},
    )
    rows = dict(line.strip("| ").split(" | ") for line in table.splitlines()[2:])
    assert rows["images rebuilt (`--force`; Debian base reused)"] == ("189 s")
    assert rows["image `tandem.local/tandem:dev`"] == "372.7 MiB"
    assert rows["image `registry.k8s.io/pause:3.10`"] == "0.3 MiB"
    assert rows["decode pod: created → Ready"] == "9.8 s"
    assert rows["node daemon kubelet: resident memory"] == "61 MiB"
    assert rows["pods' resident memory (sum of VmRSS)"] == "911 MiB"
    assert rows["NetworkPolicy enforced by the test network"] == "no (bridge CNI)"
    assert rows["Ray group (TP2 prefill, 2 pods): created → Ready"] == "31.0 s"
    assert rows["Ray group's leader SIGKILLed under load: kill → group recreated, Ready"] == (
        "38.7 s"
    )
    assert rows["prefills the router still sent the group after its leader was killed"] == "3"
    assert rows["answered during both group kills (0 failed)"] == "403"
    stopped = "Ray group's {} SIGKILLed: kill → the frontend takes the group out of its choices"
    assert rows[stopped.format("follower") + " (its log)"] == "0.25 s"
    assert rows[stopped.format("leader") + " (its log)"] == "0.08 s"
    assert len(rows) == 23
