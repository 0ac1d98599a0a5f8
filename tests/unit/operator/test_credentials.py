"""The cluster's credentials Secret and its rotation (pure: tandem_operator.render.credentials)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest

from tandem.security import CredentialBundle
from tandem.security.credentials import CredentialsError, check_bundle
from tandem.security.pki import Issued, issue, split_pem
from tandem_operator import names
from tandem_operator.render.children import render_credentials
from tandem_operator.render.credentials import (
    MOUNTED_KEYS,
    CredentialState,
    Phase,
    parse_credentials_secret,
    plan_credentials,
    render_credentials_volume,
)

from .test_render import load

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
WAIT = timedelta(seconds=150)


class Issuer:
    """Counts the certificates it makes (the controller's ``issue`` seam)."""

    def __init__(self) -> None:
        self.made: list[Issued] = []

    def __call__(self) -> Issued:
        self.made.append(issue("reference", T0))
        return self.made[-1]


def bundle_of(state: CredentialState) -> CredentialBundle:
    """What a pod mounts in this state."""
    return CredentialBundle(state.trust, state.current.cert, state.current.key)


def accepts(server: CredentialState, client: CredentialState) -> bool:
    """Would a member in state ``server`` accept a member in state ``client`` (and the
    other way round)? Both certificates must chain to the other side's trust."""
    try:
        check_bundle(CredentialBundle(server.trust, client.current.cert, client.current.key), T0)
        check_bundle(CredentialBundle(client.trust, server.current.cert, server.current.key), T0)
    except CredentialsError:
        return False
    return True


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


def test_pods_mount_the_member_files_only() -> None:
    volume = render_credentials_volume("reference")
    items = volume["secret"]["items"]
    assert [i["key"] for i in items] == list(MOUNTED_KEYS) == ["ca.crt", "tls.crt", "tls.key"]
    assert volume["secret"]["defaultMode"] == 0o440
