"""The cluster's credentials Secret and its rotation (pure: tandem_operator.render.credentials)."""

from __future__ import annotations

import base64
import itertools
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest

from tandem.api.v1alpha1 import PoolRole
from tandem.security import CredentialBundle, Identity
from tandem.security.credentials import CredentialsError, check_bundle
from tandem.security.pki import Issued, issue, split_pem
from tandem_operator import names
from tandem_operator.render.children import render_credentials
from tandem_operator.render.credentials import (
    MOUNTED_KEYS,
    CredentialState,
    Member,
    Phase,
    parse_credentials_secret,
    plan_credentials,
    render_credentials_volume,
)
from tandem_operator.render.pods import render_frontend_pod_template, render_worker_pod_template

from .test_render import SETTINGS, load

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
WAIT = timedelta(seconds=150)


class Issuer:
    """Counts the certificates it makes (the controller's ``issue`` seam)."""

    def __init__(self) -> None:
        self.made: list[Issued] = []

    def __call__(self) -> Issued:
        self.made.append(issue("reference", T0))
        return self.made[-1]


def mounted(state: CredentialState, identity: Identity) -> CredentialBundle:
    """What a pod of role ``identity`` mounts in this state: the rendered Secret's items,
    under the file names the pod's volume maps them to."""
    secret = render_credentials(load("reference-cpu.yaml"), state)
    items = render_credentials_volume("reference", identity)["secret"]["items"]
    files = {i["path"]: base64.b64decode(secret["data"][i["key"]]) for i in items}
    return CredentialBundle(files["ca.crt"], files["tls.crt"], files["tls.key"])


def bundle_of(state: CredentialState) -> CredentialBundle:
    """What a worker pod mounts in this state."""
    return mounted(state, Identity.WORKER)


def accepts(server: CredentialState, client: CredentialState) -> bool:
    """Would members in state ``server`` accept members in state ``client`` (and the
    other way round), whatever their roles? Every certificate must chain to the other
    side's trust."""
    for ours, theirs in itertools.product(Identity, repeat=2):
        a, b = mounted(server, ours), mounted(client, theirs)
        try:
            check_bundle(CredentialBundle(a.trust, b.cert, b.key), T0)
            check_bundle(CredentialBundle(b.trust, a.cert, a.key), T0)
        except CredentialsError:
            return False
    return True


def legacy(state: CredentialState) -> CredentialState:
    """``state`` as a version before roles held it: one member pair for every pod."""

    def strip(m: Member) -> Member:
        return Member(m.ca, m.cert, m.key)

    nxt = None if state.next is None else strip(state.next)
    return replace(state, current=strip(state.current), next=nxt)


def legacy_secret(state: CredentialState) -> dict[str, Any]:
    """The Secret the previous version wrote for ``state``: no frontend items."""
    secret = render_credentials(load("reference-cpu.yaml"), state)
    for key in ("frontend.crt", "frontend.key", "next-frontend.crt", "next-frontend.key"):
        secret["data"].pop(key, None)
    return secret


def rotate(issuer: Issuer) -> list[CredentialState]:
    """A fresh cluster, then a requested rotation through all its phases."""
    first = plan_credentials(None, "", T0, issuer, WAIT).state
    states = [first]
    now, requested = T0 + timedelta(days=1), "2026-12-02"
    for _ in range(3):
        plan = plan_credentials(states[-1], requested, now, issuer, WAIT)
        states.append(plan.state)
        now += WAIT
    return states


def test_a_new_cluster_gets_a_stable_ca_and_member_certificate() -> None:
    issuer = Issuer()
    plan = plan_credentials(None, "", T0, issuer, WAIT)
    assert plan.state.phase is Phase.STABLE and plan.requeue_s is None
    assert len(issuer.made) == 1
    check_bundle(bundle_of(plan.state), T0)
    # Nothing to do while nothing is asked: same state, no new certificate.
    again = plan_credentials(plan.state, "", T0 + timedelta(days=10), issuer, WAIT)
    assert again.state is plan.state and again.requeue_s is None and len(issuer.made) == 1


def test_a_requested_rotation_goes_through_three_phases() -> None:
    issuer = Issuer()
    stable, trusting, switching, done = rotate(issuer)
    assert [s.phase for s in (trusting, switching, done)] == [
        Phase.TRUSTING,
        Phase.SWITCHING,
        Phase.STABLE,
    ]
    old, new = issuer.made
    assert len(split_pem(trusting.trust)) == 2 and trusting.current == stable.current
    assert switching.current.cert == new.cert and len(split_pem(switching.trust)) == 2
    assert done.trust == new.ca_cert and done.next is None and done.rotation == "2026-12-02"
    assert old.cert == stable.current.cert
    # Both roles move together: each phase's pods present the same generation.
    for state, issued in ((stable, old), (trusting, old), (switching, new), (done, new)):
        for identity in Identity:
            assert mounted(state, identity).cert == issued.pair(identity)[0]


def test_members_one_phase_apart_always_accept_each_other() -> None:
    states = rotate(Issuer())
    for a, b in itertools.pairwise(states):
        assert accepts(a, b), (a.phase, b.phase)
    # Two phases apart the old and the new certificate meet a trust that lacks one:
    # why each phase waits for the Secret to reach every pod.
    assert not accepts(states[0], states[2])
    assert not accepts(states[1], states[3])


def test_a_phase_waits_for_the_secret_to_reach_every_pod() -> None:
    issuer = Issuer()
    trusting = rotate(issuer)[1]
    halfway = plan_credentials(trusting, "2026-12-02", trusting.since + WAIT / 3, issuer, WAIT)
    assert halfway.state is trusting
    assert halfway.requeue_s == pytest.approx((WAIT * 2 / 3).total_seconds())


def test_certificates_are_renewed_thirty_days_before_they_expire() -> None:
    issuer = Issuer()
    stable = plan_credentials(None, "", T0, issuer, WAIT).state
    expires = stable.expires
    quiet = plan_credentials(stable, "", expires - timedelta(days=31), issuer, WAIT)
    assert quiet.state is stable
    renewing = plan_credentials(stable, "", expires - timedelta(days=29), issuer, WAIT)
    assert renewing.state.phase is Phase.TRUSTING and renewing.started_rotation


def test_the_secret_round_trips_and_is_a_valid_object() -> None:
    cr = load("reference-cpu.yaml")
    for state in rotate(Issuer()):
        secret = render_credentials(cr, state)
        kubernetes_validate.validate(secret, "1.36", strict=True)
        assert secret["metadata"]["name"] == "reference-credentials"
        assert secret["metadata"]["ownerReferences"][0]["kind"] == "InferenceCluster"
        assert parse_credentials_secret(secret) == state


@pytest.mark.parametrize(
    "spoil",
    [
        lambda s: s["data"].pop("tls.key"),
        lambda s: s["metadata"]["annotations"].pop(names.ANNOTATION_CREDENTIALS_PHASE),
        lambda s: s["data"].update({"ca.crt": "not base64!"}),
        lambda s: s["metadata"]["annotations"].update(
            {names.ANNOTATION_CREDENTIALS_PHASE: "Trusting"}
        ),  # Trusting without the next certificate
    ],
)
def test_an_unusable_secret_parses_as_none(spoil: Any) -> None:
    secret = render_credentials(load("reference-cpu.yaml"), rotate(Issuer())[0])
    spoil(secret)
    assert parse_credentials_secret(secret) is None


def test_the_secret_holds_a_pair_per_role_and_the_next_pairs_while_rotating() -> None:
    stable, trusting, switching, done = rotate(Issuer())
    role_keys = {"ca.crt", "member-ca.crt", "tls.crt", "tls.key", "frontend.crt", "frontend.key"}
    next_keys = {"next-ca.crt", "next.crt", "next.key", "next-frontend.crt", "next-frontend.key"}
    cr = load("reference-cpu.yaml")
    for state in (stable, switching, done):
        assert set(render_credentials(cr, state)["data"]) == role_keys
    assert set(render_credentials(cr, trusting)["data"]) == role_keys | next_keys
    # Each role's pods present their own certificate, and it names their role.
    for identity in Identity:
        check_bundle(mounted(stable, identity), T0)
        uri = f"spiffe://reference.tandem.internal/{identity.value}".encode()
        assert uri in _san_of(mounted(stable, identity).cert)
    assert mounted(stable, Identity.WORKER).key != mounted(stable, Identity.FRONTEND).key


def _san_of(cert: bytes) -> bytes:
    from cryptography import x509

    parsed = x509.load_pem_x509_certificate(cert)
    names_ = parsed.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return b" ".join(n.encode() for n in names_.get_values_for_type(x509.UniformResourceIdentifier))


def test_a_secret_from_before_roles_is_upgraded_by_a_rotation() -> None:
    """The previous version's Secret has one member pair and no frontend pair; the CA
    that signed it kept no key, so the frontend pair comes with a new CA: a rotation,
    started on the first reconcile although nothing asked for one."""
    issuer = Issuer()
    fresh = plan_credentials(None, "r1", T0, issuer, WAIT).state
    old = parse_credentials_secret(legacy_secret(fresh))
    assert old is not None and not old.current.has_roles and old == legacy(fresh)
    # Until Switching, frontends present the old member certificate (their items repeat
    # it: every pod keeps working, and pods of the previous version too).
    upgrading = plan_credentials(old, "r1", T0 + timedelta(days=1), issuer, WAIT)
    assert upgrading.started_rotation and upgrading.state.phase is Phase.TRUSTING
    assert upgrading.state.rotation == "r1"
    assert mounted(upgrading.state, Identity.FRONTEND) == mounted(upgrading.state, Identity.WORKER)
    check_bundle(mounted(upgrading.state, Identity.FRONTEND), T0)
    assert (
        parse_credentials_secret(render_credentials(load("reference-cpu.yaml"), upgrading.state))
        == upgrading.state
    )
    states = [old, upgrading.state]
    now = T0 + timedelta(days=1)
    for _ in range(2):
        now += WAIT
        states.append(plan_credentials(states[-1], "r1", now, issuer, WAIT).state)
    switching, done = states[2:]
    new = issuer.made[-1]
    assert [s.phase for s in states[1:]] == [Phase.TRUSTING, Phase.SWITCHING, Phase.STABLE]
    for identity in Identity:
        assert mounted(switching, identity).cert == new.pair(identity)[0]
    assert done.trust == new.ca_cert and done.current.has_roles
    for a, b in itertools.pairwise(states):
        assert accepts(a, b), (a.phase, b.phase)
    # Upgraded: nothing more to do.
    assert plan_credentials(done, "r1", now + WAIT, issuer, WAIT).state is done


def test_a_rotation_the_previous_version_began_finishes_then_upgrades() -> None:
    issuer = Issuer()
    _, trusting, *_ = rotate(issuer)
    old = parse_credentials_secret(legacy_secret(legacy(trusting)))
    assert old is not None and old.phase is Phase.TRUSTING and old.next is not None
    assert not old.next.has_roles
    now = old.since + WAIT
    switching = plan_credentials(old, "2026-12-02", now, issuer, WAIT).state
    stable = plan_credentials(switching, "2026-12-02", now + WAIT, issuer, WAIT)
    assert stable.state.phase is Phase.STABLE and not stable.state.current.has_roles
    upgrade = plan_credentials(stable.state, "2026-12-02", now + 2 * WAIT, issuer, WAIT)
    assert upgrade.started_rotation and upgrade.state.next is not None
    assert upgrade.state.next.has_roles


def test_each_role_mounts_its_own_pair_only() -> None:
    worker = render_credentials_volume("reference", Identity.WORKER)
    frontend = render_credentials_volume("reference", Identity.FRONTEND)
    as_files = {i["key"]: i["path"] for i in worker["secret"]["items"]}
    assert as_files == dict(MOUNTED_KEYS[Identity.WORKER])
    assert as_files == {"ca.crt": "ca.crt", "tls.crt": "tls.crt", "tls.key": "tls.key"}
    as_files = {i["key"]: i["path"] for i in frontend["secret"]["items"]}
    assert as_files == {"ca.crt": "ca.crt", "frontend.crt": "tls.crt", "frontend.key": "tls.key"}
    for volume in (worker, frontend):
        assert volume["secret"]["defaultMode"] == 0o440
        assert not any(i["key"].startswith("next") for i in volume["secret"]["items"])


def _credentials_volume(template: dict[str, Any]) -> dict[str, Any]:
    volumes = template["spec"]["volumes"]
    return next(v for v in volumes if v["name"] == "credentials")


def test_pods_get_their_role_s_credentials_volume() -> None:
    cr = load("reference-cpu.yaml")
    front = render_frontend_pod_template(cr, SETTINGS, "hash")
    assert _credentials_volume(front) == render_credentials_volume("reference", Identity.FRONTEND)
    keys = {i["key"] for i in _credentials_volume(front)["secret"]["items"]}
    assert "tls.key" not in keys  # the worker key never reaches the frontend pod
    for role in PoolRole:
        pod = render_worker_pod_template(cr, role, SETTINGS, "hash")
        volume = _credentials_volume(pod)
        assert volume == render_credentials_volume("reference", Identity.WORKER)
        assert "frontend.key" not in {i["key"] for i in volume["secret"]["items"]}
