"""Each InferenceCluster's credentials: a Secret the operator owns, and its rotation.

The Secret ``<cluster>-credentials`` holds what every frontend and worker pod mounts
(``ca.crt``: the CAs members trust; ``tls.crt`` + ``tls.key``: the member certificate
all of them present; see ``tandem.security``) plus, while a rotation runs, the next
member certificate (``next.crt``, ``next.key``), which pods do not mount.

Rotation is requested by changing the cluster's ``tandem.dev/rotate-credentials``
annotation (any new value), and happens by itself 30 days before the certificate
expires. Kubernetes updates a mounted Secret in each pod on its own schedule (about a
minute), so a rotation goes in three phases, each given ``propagation`` to reach every
pod before the next one starts:

1. ``Trusting``: a new CA and member certificate are made; ``ca.crt`` holds the old and
   the new CA, members still present the old certificate.
2. ``Switching``: members present the new certificate (the old CA is still trusted).
3. ``Stable``: ``ca.crt`` holds the new CA only.

At every moment, two pods at most one phase apart accept each other. Pods never restart
for a rotation; connections already open are never re-checked, so no request in flight
is cut. A pod whose Secret update lags by more than ``propagation`` (two phases behind)
fails new handshakes with pods that are ahead until its files catch up: its calls then
fail as UNAVAILABLE and the router sends the request to another worker.

Everything here is pure: the clock and the certificate factory are parameters; the
controller applies the rendered Secret.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from tandem.security.pki import Issued, join_pem, not_after
from tandem_operator import names

Manifest = dict[str, Any]
IssueFn = Callable[[], Issued]

# Trust, member certificate and key: the only keys pods mount.
MOUNTED_KEYS = ("ca.crt", "tls.crt", "tls.key")
RENEW_BEFORE = timedelta(days=30)
DEFAULT_PROPAGATION = timedelta(seconds=150)


class Phase(StrEnum):
    STABLE = "Stable"
    TRUSTING = "Trusting"
    SWITCHING = "Switching"


@dataclass(frozen=True, slots=True)
class Member:
    """A member certificate, its key, and the CA that signed it (PEM)."""

    ca: bytes
    cert: bytes
    key: bytes

    @classmethod
    def of(cls, issued: Issued) -> Member:
        return cls(issued.ca_cert, issued.cert, issued.key)


@dataclass(frozen=True, slots=True)
class CredentialState:
    phase: Phase
    since: datetime  # when the phase began
    rotation: str  # the rotate-credentials value this state answers
    trust: bytes
    current: Member
    next: Member | None = None

    @property
    def expires(self) -> datetime:
        return not_after(self.current.cert)


@dataclass(frozen=True, slots=True)
class CredentialPlan:
    state: CredentialState
    requeue_s: float | None  # when to look again (a phase is waiting), else None
    started_rotation: bool = False


def requested_rotation(annotations: Mapping[str, str]) -> str:
    return annotations.get(names.ANNOTATION_ROTATE_CREDENTIALS, "")


def plan_credentials(
    state: CredentialState | None,
    requested: str,
    now: datetime,
    issue: IssueFn,
    propagation: timedelta = DEFAULT_PROPAGATION,
) -> CredentialPlan:
    """The credentials the cluster should have now, given what its Secret holds."""
    if state is None:
        member = Member.of(issue())
        fresh = CredentialState(Phase.STABLE, now, requested, member.ca, member)
        return CredentialPlan(fresh, None)
    waited = now - state.since
    if state.phase is Phase.STABLE:
        if requested == state.rotation and now < state.expires - RENEW_BEFORE:
            return CredentialPlan(state, None)
        new = Member.of(issue())
        trusting = CredentialState(
            Phase.TRUSTING, now, requested, join_pem(state.trust, new.ca), state.current, new
        )
        return CredentialPlan(trusting, propagation.total_seconds(), started_rotation=True)
    if waited < propagation:
        return CredentialPlan(state, (propagation - waited).total_seconds())
    if state.phase is Phase.TRUSTING and state.next is not None:
        switching = replace(state, phase=Phase.SWITCHING, since=now, current=state.next, next=None)
        return CredentialPlan(switching, propagation.total_seconds())
    stable = replace(state, phase=Phase.STABLE, since=now, trust=state.current.ca, next=None)
    return CredentialPlan(stable, None)


# ------------------------------------------------------------------------ the Secret


def render_credentials_secret(meta: Manifest, state: CredentialState) -> Manifest:
    """The Secret holding ``state`` (``meta``: its name, namespace, labels, owner)."""
    data = {
        "ca.crt": state.trust,
        "tls.crt": state.current.cert,
        "tls.key": state.current.key,
        "member-ca.crt": state.current.ca,
    }
    if state.next is not None:
        data |= {
            "next-ca.crt": state.next.ca,
            "next.crt": state.next.cert,
            "next.key": state.next.key,
        }
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            **meta,
            "annotations": {
                names.ANNOTATION_CREDENTIALS_PHASE: state.phase.value,
                names.ANNOTATION_CREDENTIALS_SINCE: state.since.strftime("%Y-%m-%dT%H:%M:%SZ"),
                names.ANNOTATION_CREDENTIALS_ROTATION: state.rotation,
            },
        },
        "type": "Opaque",
        "data": {k: base64.b64encode(v).decode() for k, v in sorted(data.items())},
    }


def parse_credentials_secret(secret: Manifest | None) -> CredentialState | None:
    """What a Secret rendered above holds; None if there is none or it is unusable."""
    if secret is None:
        return None
    annotations = secret.get("metadata", {}).get("annotations") or {}
    raw = secret.get("data") or {}
    try:
        data = {k: base64.b64decode(v, validate=True) for k, v in raw.items()}
        phase = Phase(annotations[names.ANNOTATION_CREDENTIALS_PHASE])
        since = datetime.fromisoformat(annotations[names.ANNOTATION_CREDENTIALS_SINCE])
        current = Member(data["member-ca.crt"], data["tls.crt"], data["tls.key"])
        trust = data["ca.crt"]
    except (KeyError, ValueError, binascii.Error):
        return None
    nxt = None
    if {"next-ca.crt", "next.crt", "next.key"} <= data.keys():
        nxt = Member(data["next-ca.crt"], data["next.crt"], data["next.key"])
    if phase is Phase.TRUSTING and nxt is None:
        return None
    rotation = annotations.get(names.ANNOTATION_CREDENTIALS_ROTATION, "")
    return CredentialState(phase, since, rotation, trust, current, nxt)


def render_credentials_volume(cluster: str) -> Manifest:
    """The pod volume with the member's files only (never the next key)."""
    return {
        "name": "credentials",
        "secret": {
            "secretName": names.credentials_secret_name(cluster),
            "items": [{"key": k, "path": k} for k in MOUNTED_KEYS],
            "defaultMode": 0o440,
        },
    }
