"""The MPI SSH keys of clusters whose workers span nodes (mpi_keys.py): the key pair's
formats, the rotation's phases on a fake clock, the Secret, adopting a hand-made one, and
the reconcile applying it (the API server is test_planning_reconcile's stand-in)."""

from __future__ import annotations

import base64
import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from tandem.api.v1alpha1 import InferenceCluster
from tandem_operator import names, reasons
from tandem_operator.render.children import render_mpi_keys
from tandem_operator.render.credentials import Phase
from tandem_operator.render.mpi_keys import (
    KeyPair,
    MpiKeyState,
    adopt_mpi_keys_secret,
    generate_key_pair,
    owned_by,
    parse_mpi_keys_secret,
    plan_mpi_keys,
)

from .cluster_world import ClusterWorld, Counted
from .test_gpu_render import load, multi_node_cluster

Json = dict[str, Any]
NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
PROPAGATION = timedelta(seconds=150)


def presented(state: MpiKeyState) -> bytes:
    """The public key of the private key a leader mounts, as ssh would derive it."""
    key = serialization.load_ssh_private_key(state.current.private, password=None)
    return key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )


def accepts(follower: MpiKeyState, leader: MpiKeyState) -> bool:
    return presented(leader) in follower.trust.splitlines()


def rotate(maker: Counted[KeyPair]) -> list[MpiKeyState]:
    """Every state of a rotation asked for at NOW, each phase given PROPAGATION."""
    state = plan_mpi_keys(None, "", NOW, maker).state
    states, moment = [state], NOW
    for _ in range(3):
        state = plan_mpi_keys(state, "1", moment, maker, PROPAGATION).state
        states.append(state)
        moment += PROPAGATION
    return states


# ------------------------------------------------------------------ the key pair


def test_the_key_pair_is_in_the_formats_ssh_and_sshd_read() -> None:
    pair = generate_key_pair()
    assert pair.private.startswith(b"-----BEGIN OPENSSH PRIVATE KEY-----\n")
    private = serialization.load_ssh_private_key(pair.private, password=None)
    assert isinstance(private, Ed25519PrivateKey)  # and unencrypted: no password asked
    assert pair.public.startswith(b"ssh-ed25519 ") and pair.public.count(b"\n") == 1
    public = serialization.load_ssh_public_key(pair.public.strip())
    assert isinstance(public, Ed25519PublicKey)
    assert public.public_bytes_raw() == private.public_key().public_bytes_raw()
    assert generate_key_pair() != pair


# ------------------------------------------------------------------ the rotation


def test_a_new_cluster_gets_one_key_pair_that_its_followers_accept() -> None:
    maker = Counted(generate_key_pair)
    plan = plan_mpi_keys(None, "", NOW, maker)
    assert (plan.state.phase, plan.requeue_s, maker.made) == (Phase.STABLE, None, 1)
    assert plan.state.trust == plan.state.current.public
    assert accepts(plan.state, plan.state)
    # Nothing asked, nothing done: no key is made again, however late.
    later = plan_mpi_keys(plan.state, "", NOW + timedelta(days=3650), maker)
    assert (later.state, later.requeue_s, maker.made) == (plan.state, None, 1)


def test_a_requested_rotation_trusts_the_new_key_then_uses_it_then_drops_the_old() -> None:
    maker = Counted(generate_key_pair)
    stable, trusting, switching, done = rotate(maker)
    old, new = stable.current, trusting.next
    assert new is not None and maker.made == 2
    assert trusting.phase is Phase.TRUSTING and trusting.current == old
    assert trusting.trust.splitlines() == [old.public.strip(), new.public.strip()]
    assert switching.phase is Phase.SWITCHING and switching.current == new
    assert switching.trust == trusting.trust and switching.next is None
    assert done.phase is Phase.STABLE and done.trust == new.public and done.rotation == "1"
    assert not accepts(done, stable)  # the old key no longer logs in


def test_leaders_and_followers_one_phase_apart_always_accept_each_other() -> None:
    states = rotate(Counted(generate_key_pair))
    for a, b in itertools.pairwise(states):
        assert accepts(a, b) and accepts(b, a)
    # Two phases apart (a lagging mount) they may not: hence a wait per phase.
    assert not accepts(states[3], states[0])


def test_a_phase_waits_for_the_secret_to_reach_every_pod() -> None:
    maker = Counted(generate_key_pair)
    stable = plan_mpi_keys(None, "", NOW, maker).state
    trusting = plan_mpi_keys(stable, "1", NOW, maker, PROPAGATION)
    assert trusting.requeue_s == 150
    early = plan_mpi_keys(trusting.state, "1", NOW + timedelta(seconds=100), maker, PROPAGATION)
    assert (early.state, early.requeue_s) == (trusting.state, 50)
    # A second request during a rotation is answered by the rotation under way.
    again = plan_mpi_keys(trusting.state, "2", NOW + timedelta(seconds=100), maker, PROPAGATION)
    assert again.state == trusting.state and maker.made == 2


# ------------------------------------------------------------------ the Secret


def test_the_secret_round_trips_holds_the_next_pair_while_rotating_and_is_valid() -> None:
    cr = multi_node_cluster()
    for state in rotate(Counted(generate_key_pair)):
        secret = render_mpi_keys(cr, state)
        kubernetes_validate.validate(secret, "1.36", strict=True)
        assert parse_mpi_keys_secret(secret) == state
        assert ("next-id_ed25519" in secret["data"]) == (state.phase is Phase.TRUSTING)
    meta = secret["metadata"]
    assert meta["name"] == "gpt-oss-120b-mpi-ssh"
    assert meta["labels"] == names.cluster_labels("gpt-oss-120b")
    assert meta["ownerReferences"][0]["kind"] == "InferenceCluster"
    assert owned_by(secret, "ic-uid") and not owned_by(secret, "other") and not owned_by({}, None)


@pytest.mark.parametrize(
    "spoil",
    [
        lambda s: s["metadata"]["annotations"].pop(names.ANNOTATION_MPI_KEYS_PHASE),
        lambda s: s["metadata"]["annotations"].update({names.ANNOTATION_MPI_KEYS_SINCE: "x"}),
        lambda s: s["data"].pop("authorized_keys"),
        lambda s: s["data"].update({"id_ed25519": "not base64!"}),
        lambda s: s["data"].pop("next-id_ed25519"),  # Trusting without the next key
    ],
)
def test_an_unusable_secret_parses_as_none(spoil: Any) -> None:
    trusting = rotate(Counted(generate_key_pair))[1]
    secret = render_mpi_keys(multi_node_cluster(), trusting)
    spoil(secret)
    assert parse_mpi_keys_secret(secret) is None


def hand_made(**data: bytes) -> Json:
    """What `kubectl create secret generic --from-file=...` makes."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "c-mpi-ssh", "namespace": "ns", "uid": "s-uid"},
        "type": "Opaque",
        "data": {k.replace("_pub", ".pub"): base64.b64encode(v).decode() for k, v in data.items()},
    }


def test_a_hand_made_key_pair_is_adopted_as_it_is() -> None:
    pair = generate_key_pair()
    secret = hand_made(id_ed25519=pair.private, id_ed25519_pub=pair.public.strip())
    state = adopt_mpi_keys_secret(secret, "r", NOW)
    assert state == MpiKeyState(
        Phase.STABLE, NOW, "r", pair.public, KeyPair(pair.private, pair.public.strip())
    )
    # A Secret the operator rendered for an earlier cluster of that name keeps its phase.
    trusting = rotate(Counted(generate_key_pair))[1]
    assert adopt_mpi_keys_secret(render_mpi_keys(multi_node_cluster(), trusting), "", NOW) == (
        trusting
    )


@pytest.mark.parametrize(
    "secret",
    [
        hand_made(token=b"someone else's"),
        hand_made(id_ed25519=b"k"),  # no public key: nothing to put in authorized_keys
        {**hand_made(id_ed25519=b"k", id_ed25519_pub=b"p"), "type": "kubernetes.io/ssh-auth"},
    ],
)
def test_a_secret_without_a_key_pair_is_not_adopted(secret: Json) -> None:
    assert adopt_mpi_keys_secret(secret, "", NOW) is None


# ------------------------------------------------------------------ the reconcile

SECRET = ("Secret", "c-mpi-ssh")


class World(ClusterWorld):
    def __init__(self, cr: InferenceCluster) -> None:
        self.maker = Counted(generate_key_pair)
        super().__init__(cr, NOW, credential_propagation=PROPAGATION, new_mpi_keys=self.maker)

    def annotate(self, rotation: str) -> None:
        self.cluster["metadata"]["annotations"] = {names.ANNOTATION_ROTATE_MPI_KEYS: rotation}
        self.publish()

    def keys(self) -> MpiKeyState:
        state = parse_mpi_keys_secret(self.server.objects[SECRET])
        assert state is not None
        return state


async def test_an_mpi_cluster_gets_its_keys_owned_by_it_and_others_get_none() -> None:
    world = World(multi_node_cluster())
    await world.reconcile()
    secret = world.server.objects[SECRET]
    assert secret["metadata"]["ownerReferences"][0]["uid"] == "u"
    assert secret["metadata"]["labels"][names.LABEL_MANAGED_BY] == names.MANAGED_BY
    assert world.keys().phase is Phase.STABLE and world.maker.made == 1
    assert ("LeaderWorkerSet", "c-decode") in world.server.objects
    # The next reconcile finds it in the cache: no read, no new key, no write.
    world.server.gets.clear()
    await world.reconcile()
    assert world.server.gets == [] and world.maker.made == 1
    assert world.server.objects[SECRET] is secret

    single = World(load("gpt-oss-120b-gb200.yaml"))  # trtllm, one node per worker
    await single.reconcile()
    assert SECRET not in single.server.objects and single.server.gets == []
    assert single.maker.made == 0


async def test_a_rotation_goes_through_its_phases_over_reconciles() -> None:
    world = World(multi_node_cluster())
    await world.reconcile()
    old = world.keys().current
    world.annotate("2026-01-01")
    assert await world.reconcile() == PROPAGATION.total_seconds()
    assert world.keys().phase is Phase.TRUSTING and world.keys().current == old
    world.now += PROPAGATION
    await world.reconcile()
    switching = world.keys()
    assert switching.phase is Phase.SWITCHING and switching.current != old
    assert old.public in switching.trust.splitlines(keepends=True)
    world.now += PROPAGATION
    assert await world.reconcile() is None
    assert world.keys().phase is Phase.STABLE and world.keys().trust == switching.current.public


async def test_a_hand_made_secret_is_adopted_with_its_key_pair() -> None:
    world = World(multi_node_cluster())
    pair = generate_key_pair()
    world.server.objects[SECRET] = hand_made(id_ed25519=pair.private, id_ed25519_pub=pair.public)
    await world.reconcile()
    assert world.keys().current == pair and world.keys().trust == pair.public
    assert world.maker.made == 0
    meta = world.server.objects[SECRET]["metadata"]
    assert meta["ownerReferences"][0]["uid"] == "u" and meta["uid"] == "s-uid"
    adopted = [e for e in world.server.events if e["reason"] == reasons.EVENT_MPI_KEYS_ADOPTED]
    assert len(adopted) == 1 and "c-mpi-ssh" in adopted[0]["message"]
    assert ("LeaderWorkerSet", "c-decode") in world.server.objects


async def test_someone_else_s_secret_is_left_alone_and_nothing_is_applied() -> None:
    world = World(multi_node_cluster())
    theirs = hand_made(token=b"someone else's")
    world.server.objects[SECRET] = theirs
    await world.reconcile()
    assert world.server.objects[SECRET] == theirs
    assert ("LeaderWorkerSet", "c-decode") not in world.server.objects
    status, reason, message = world.condition(reasons.DEGRADED)
    assert (status, reason) == ("True", reasons.MPI_SECRET_CONFLICT)
    assert "kubectl -n ns delete secret c-mpi-ssh" in message
    # Once it is gone, the operator makes its own and applies the cluster.
    del world.server.objects[SECRET]
    await world.reconcile()
    assert world.keys().phase is Phase.STABLE and world.maker.made == 1
    assert ("LeaderWorkerSet", "c-decode") in world.server.objects
