"""Each InferenceCluster's credentials: a Secret the operator owns, and its rotation.

The Secret ``<cluster>-credentials`` holds one certificate + key per role, both signed
by the cluster's CA (``tandem.security.pki``, ``tandem.security.identity``):

- ``tls.crt`` + ``tls.key``: the worker certificate; worker pods mount these and
  ``ca.crt`` (the CAs members trust);
- ``frontend.crt`` + ``frontend.key``: the frontend certificate; frontend pods mount
  these as ``tls.crt`` + ``tls.key`` (the names every member reads) and ``ca.crt``.

So the frontend's key never reaches a worker pod, nor a worker's key a frontend pod.
While a rotation runs the Secret also holds the next certificates (``next.crt``,
``next.key``, ``next-frontend.crt``, ``next-frontend.key``), which no pod mounts.

A Secret written before roles existed holds one member certificate (``tls.*``, no
``frontend.*``) that every pod presented. A frontend pair cannot be added to it: the CA
that signed it kept no key. So it is upgraded by a rotation started on the first
reconcile (whatever the annotation says); until its ``Switching`` phase the frontend
items repeat the old member certificate, then each role gets its own, and ``Stable``
retires the old CA, and with it the key that frontend pods held.

Rotation is requested by changing the cluster's ``tandem.dev/rotate-credentials``
annotation (any new value), and happens by itself 30 days before the certificate
expires. Kubernetes updates a mounted Secret in each pod on its own schedule (about a
minute), so a rotation goes in three phases, each given ``propagation`` to reach every
pod before the next one starts:

1. ``Trusting``: a new CA and both role certificates are made; ``ca.crt`` holds the old
   and the new CA, members still present the old certificates.
2. ``Switching``: members present the new certificates (the old CA is still trusted).
3. ``Stable``: ``ca.crt`` holds the new CA only.

Both role certificates always move together.

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
from typing import Any, Protocol, TypeVar

from tandem.security.identity import Identity
from tandem.security.pki import Issued, join_pem, not_after
from tandem_operator import names

Manifest = dict[str, Any]
IssueFn = Callable[[], Issued]

# What each role's pods mount: Secret key -> file name (the names every member reads).
MOUNTED_KEYS: Mapping[Identity, Mapping[str, str]] = {
    Identity.WORKER: {"ca.crt": "ca.crt", "tls.crt": "tls.crt", "tls.key": "tls.key"},
    Identity.FRONTEND: {"ca.crt": "ca.crt", "frontend.crt": "tls.crt", "frontend.key": "tls.key"},
}
RENEW_BEFORE = timedelta(days=30)
DEFAULT_PROPAGATION = timedelta(seconds=150)


class Phase(StrEnum):
    STABLE = "Stable"
    TRUSTING = "Trusting"
    SWITCHING = "Switching"


@dataclass(frozen=True, slots=True)
class Member:
    """The certificates + keys of both roles and the CA that signed them (PEM).

    ``frontend_cert``/``frontend_key`` are None for a member certificate issued before
    roles existed (``cert``/``key`` then served every pod)."""

    ca: bytes
    cert: bytes
    key: bytes
    frontend_cert: bytes | None = None
    frontend_key: bytes | None = None

    @classmethod
    def of(cls, issued: Issued) -> Member:
        return cls(issued.ca_cert, issued.cert, issued.key, *issued.pair(Identity.FRONTEND))

    @property
    def has_roles(self) -> bool:
        return self.frontend_cert is not None and self.frontend_key is not None

    def frontend_pair(self) -> tuple[bytes, bytes]:
        """What frontend pods present: their own pair, else the pre-role member pair."""
        if self.frontend_cert is not None and self.frontend_key is not None:
            return self.frontend_cert, self.frontend_key
        return self.cert, self.key


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
    if state.phase is Phase.STABLE:
        current = requested == state.rotation and now < state.expires - RENEW_BEFORE
        if current and state.current.has_roles:
            return CredentialPlan(state, None)
        # Asked for, due, or a pre-role Secret to upgrade: rotate.
        new = Member.of(issue())
        trusting = CredentialState(
            Phase.TRUSTING, now, requested, join_pem(state.trust, new.ca), state.current, new
        )
        return CredentialPlan(trusting, propagation.total_seconds(), started_rotation=True)
    return CredentialPlan(*advance_rotation(state, now, propagation, lambda s: s.current.ca))


class RotationState(Protocol):
    """What :func:`advance_rotation` and :func:`render_rotating_secret` read of a
    rotating Secret's state (a dataclass)."""

    @property
    def phase(self) -> Phase: ...
    @property
    def since(self) -> datetime: ...
    @property
    def rotation(self) -> str: ...
    @property
    def next(self) -> object | None: ...


S = TypeVar("S", bound=RotationState)


def advance_rotation(
    state: S, now: datetime, propagation: timedelta, stable_trust: Callable[[S], bytes]
) -> tuple[S, float | None]:
    """A rotation under way (``Trusting`` or ``Switching``), moved on: each phase held
    ``propagation``, then ``Trusting`` presents the next (``current`` becomes ``next``)
    and ``Switching`` trusts only what ``stable_trust`` says of the state. With when to
    look again (None once ``Stable``). Shared by the credentials and the MPI SSH keys
    (``mpi_keys.py``), whose phases are these."""
    waited = now - state.since
    if waited < propagation:
        return state, (propagation - waited).total_seconds()
    # ``replace`` takes dataclasses, which a Protocol cannot say: both states are.
    if state.phase is Phase.TRUSTING and state.next is not None:
        switching = replace(  # type: ignore[type-var]
            state, phase=Phase.SWITCHING, since=now, current=state.next, next=None
        )
        return switching, propagation.total_seconds()
    trust = stable_trust(state)
    stable = replace(state, phase=Phase.STABLE, since=now, trust=trust, next=None)  # type: ignore[type-var]
    return stable, None


# ------------------------------------------------------------------------ the Secret


@dataclass(frozen=True, slots=True)
class RotationAnnotations:
    """The annotations a rotating Secret keeps its rotation's phase, the phase's start
    and the requested rotation in (the credentials', the MPI SSH keys')."""

    phase: str
    since: str
    rotation: str


CREDENTIAL_ANNOTATIONS = RotationAnnotations(
    names.ANNOTATION_CREDENTIALS_PHASE,
    names.ANNOTATION_CREDENTIALS_SINCE,
    names.ANNOTATION_CREDENTIALS_ROTATION,
)


def render_rotating_secret(
    meta: Manifest,
    keys: RotationAnnotations,
    state: RotationState,
    data: Mapping[str, bytes],
) -> Manifest:
    """An Opaque Secret holding ``data``, annotated with ``state``'s phase under ``keys``."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            **meta,
            "annotations": {
                keys.phase: state.phase.value,
                keys.since: state.since.strftime("%Y-%m-%dT%H:%M:%SZ"),
                keys.rotation: state.rotation,
            },
        },
        "type": "Opaque",
        "data": {k: base64.b64encode(v).decode() for k, v in sorted(data.items())},
    }


def read_rotating_secret(
    secret: Manifest, keys: RotationAnnotations
) -> tuple[Phase, datetime, str, dict[str, bytes]] | None:
    """What :func:`render_rotating_secret` wrote: phase, its start, the rotation and the
    decoded items; None if the annotations are missing or unreadable."""
    annotations = secret.get("metadata", {}).get("annotations") or {}
    try:
        phase = Phase(annotations[keys.phase])
        since = datetime.fromisoformat(annotations[keys.since])
    except (KeyError, ValueError):
        return None
    return phase, since, annotations.get(keys.rotation, ""), decoded_data(secret)


def decoded_data(secret: Manifest) -> dict[str, bytes]:
    """The Secret's items, decoded (none if any is not base64)."""
    try:
        return {
            k: base64.b64decode(v, validate=True) for k, v in (secret.get("data") or {}).items()
        }
    except (ValueError, binascii.Error):
        return {}


def render_credentials_secret(meta: Manifest, state: CredentialState) -> Manifest:
    """The Secret holding ``state`` (``meta``: its name, namespace, labels, owner)."""
    frontend_cert, frontend_key = state.current.frontend_pair()
    data = {
        "ca.crt": state.trust,
        "tls.crt": state.current.cert,
        "tls.key": state.current.key,
        "frontend.crt": frontend_cert,
        "frontend.key": frontend_key,
        "member-ca.crt": state.current.ca,
    }
    if state.next is not None:
        data |= {
            "next-ca.crt": state.next.ca,
            "next.crt": state.next.cert,
            "next.key": state.next.key,
        }
        if state.next.frontend_cert is not None and state.next.frontend_key is not None:
            data |= {
                "next-frontend.crt": state.next.frontend_cert,
                "next-frontend.key": state.next.frontend_key,
            }
    return render_rotating_secret(meta, CREDENTIAL_ANNOTATIONS, state, data)


def parse_credentials_secret(secret: Manifest | None) -> CredentialState | None:
    """What a Secret rendered above (or by a version before roles) holds; None if there
    is none or it is unusable."""
    read = None if secret is None else read_rotating_secret(secret, CREDENTIAL_ANNOTATIONS)
    if read is None:
        return None
    phase, since, rotation, data = read
    try:
        current = Member(
            data["member-ca.crt"],
            data["tls.crt"],
            data["tls.key"],
            *_frontend(data, "", data["tls.crt"]),
        )
        trust = data["ca.crt"]
    except KeyError:
        return None
    nxt = None
    if {"next-ca.crt", "next.crt", "next.key"} <= data.keys():
        nxt = Member(
            data["next-ca.crt"],
            data["next.crt"],
            data["next.key"],
            *_frontend(data, "next-", data["next.crt"]),
        )
    if phase is Phase.TRUSTING and nxt is None:
        return None
    return CredentialState(phase, since, rotation, trust, current, nxt)


def _frontend(
    data: Mapping[str, bytes], prefix: str, member_cert: bytes
) -> tuple[bytes | None, bytes | None]:
    """The frontend pair under ``prefix`` (None, None: pre-role credentials, where the
    frontend items are absent or repeat the member certificate)."""
    cert, key = data.get(f"{prefix}frontend.crt"), data.get(f"{prefix}frontend.key")
    if cert is None or key is None or cert == member_cert:
        return None, None
    return cert, key


def render_credentials_volume(cluster: str, identity: Identity) -> Manifest:
    """The pod volume of a pod of role ``identity``: the trust bundle and that role's
    certificate + key, as ``ca.crt``, ``tls.crt``, ``tls.key`` (never another role's
    key, never the next ones)."""
    items = MOUNTED_KEYS[identity]
    return {
        "name": "credentials",
        "secret": {
            "secretName": names.credentials_secret_name(cluster),
            "items": [{"key": k, "path": path} for k, path in items.items()],
            "defaultMode": 0o440,
        },
    }
