"""The SSH keys of a cluster whose workers span nodes: a Secret the operator owns, and
its rotation.

A cluster with a pool that launches an MPI world (``multinode.launches_mpi_world``) gets
the Secret ``<cluster>-mpi-ssh``, owned by the InferenceCluster; other clusters get none.
It holds one Ed25519 key pair in OpenSSH formats and what followers accept:

- ``id_ed25519``: the private key; leader pods mount it, and mpirun logs in with it;
- ``id_ed25519.pub``: its public key (``ssh-ed25519 ...``; no pod mounts it);
- ``authorized_keys``: the public keys followers accept; follower pods mount it, and
  their sshd reads it at every login (``tandem.worker.mpi_launch``).

So no follower holds the private key. While a rotation runs the Secret also holds the
next pair (``next-id_ed25519``, ``next-id_ed25519.pub``), which no pod mounts.

Rotation is requested by changing the cluster's ``tandem.dev/rotate-mpi-keys``
annotation (any new value); SSH keys do not expire, so it never happens by itself. A
leader uses the key only when it (re)starts mpirun, with whatever its mount then holds;
Kubernetes updates the mount of each pod on its own schedule, so during a rotation a
leader may see a newer Secret than a follower, or an older one. Two waits of
``propagation`` are therefore needed, as with the credentials (``credentials.py``, whose
phases these are):

1. ``Trusting``: ``authorized_keys`` holds the old and the new public key; leaders still
   get the old private key.
2. ``Switching``: leaders get the new private key (followers still accept both).
3. ``Stable``: ``authorized_keys`` holds the new public key only.

One wait is not enough: handing out the new key in the step that trusts it lets a leader
that restarts early meet a follower whose mount accepts only the old key, and dropping
the old key as soon as the new one is handed out refuses a leader whose mount still holds
the old one. Either way that mpirun fails and its whole group is recreated. A running MPI
world is never touched: sshd checks keys only at login.

A Secret of that name the cluster does not own was made by hand (as the docs asked
before the operator generated keys) or for an earlier cluster of the same name. It is
adopted, as it is, when it holds a key pair under the names the pods mount: its pair
keeps working, so a running cluster is upgraded without a restart, and it becomes the
operator's (owned by the cluster, rotated on request, deleted with the cluster). One
holding no key pair is someone else's Secret: it is never overwritten, and the cluster
is not applied until it is renamed or removed.

Everything here is pure: the clock and the key factory are parameters; the controller
applies the rendered Secret.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tandem.worker.mpi_launch import AUTHORIZED_KEYS, PRIVATE_KEY
from tandem_operator import names
from tandem_operator.render.credentials import (
    DEFAULT_PROPAGATION,
    Phase,
    RotationAnnotations,
    advance_rotation,
    decoded_data,
    read_rotating_secret,
    render_rotating_secret,
)

Manifest = dict[str, Any]
PUBLIC_KEY = f"{PRIVATE_KEY}.pub"
NEXT = "next-"
MPI_KEY_ANNOTATIONS = RotationAnnotations(
    names.ANNOTATION_MPI_KEYS_PHASE,
    names.ANNOTATION_MPI_KEYS_SINCE,
    names.ANNOTATION_MPI_KEYS_ROTATION,
)


@dataclass(frozen=True, slots=True)
class KeyPair:
    private: bytes  # OpenSSH private key format (PEM armour), what ``ssh -i`` reads
    public: bytes  # one ``ssh-ed25519 <base64>`` line, what ``authorized_keys`` lists


KeyFn = Callable[[], KeyPair]


def generate_key_pair() -> KeyPair:
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),  # mpirun logs in unattended
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return KeyPair(private, public + b"\n")


@dataclass(frozen=True, slots=True)
class MpiKeyState:
    phase: Phase
    since: datetime  # when the phase began
    rotation: str  # the rotate-mpi-keys value this state answers
    trust: bytes  # authorized_keys
    current: KeyPair
    next: KeyPair | None = None


@dataclass(frozen=True, slots=True)
class MpiKeyPlan:
    state: MpiKeyState
    requeue_s: float | None  # when to look again (a phase is waiting), else None


def authorized(*pairs: KeyPair) -> bytes:
    """``authorized_keys`` accepting ``pairs``: one line each (a hand-made ``.pub`` may
    lack its newline)."""
    return b"".join(pair.public.strip() + b"\n" for pair in pairs)


def requested_rotation(annotations: Mapping[str, str]) -> str:
    return annotations.get(names.ANNOTATION_ROTATE_MPI_KEYS, "")


def plan_mpi_keys(
    state: MpiKeyState | None,
    requested: str,
    now: datetime,
    new_pair: KeyFn,
    propagation: timedelta = DEFAULT_PROPAGATION,
) -> MpiKeyPlan:
    """The keys the cluster should have now, given what its Secret holds."""
    if state is None:
        pair = new_pair()
        return MpiKeyPlan(MpiKeyState(Phase.STABLE, now, requested, authorized(pair), pair), None)
    if state.phase is Phase.STABLE:
        if requested == state.rotation:
            return MpiKeyPlan(state, None)
        pair = new_pair()
        trusting = MpiKeyState(
            Phase.TRUSTING, now, requested, authorized(state.current, pair), state.current, pair
        )
        return MpiKeyPlan(trusting, propagation.total_seconds())
    return MpiKeyPlan(*advance_rotation(state, now, propagation, lambda s: authorized(s.current)))


# ------------------------------------------------------------------------ the Secret


def render_mpi_keys_secret(meta: Manifest, state: MpiKeyState) -> Manifest:
    """The Secret holding ``state`` (``meta``: its name, namespace, labels, owner)."""
    data = {
        PRIVATE_KEY: state.current.private,
        PUBLIC_KEY: state.current.public,
        AUTHORIZED_KEYS: state.trust,
    }
    if state.next is not None:
        data |= {NEXT + PRIVATE_KEY: state.next.private, NEXT + PUBLIC_KEY: state.next.public}
    return render_rotating_secret(meta, MPI_KEY_ANNOTATIONS, state, data)


def parse_mpi_keys_secret(secret: Manifest | None) -> MpiKeyState | None:
    """What a Secret rendered above holds; None if there is none or it is unusable."""
    read = None if secret is None else read_rotating_secret(secret, MPI_KEY_ANNOTATIONS)
    if read is None:
        return None
    phase, since, rotation, data = read
    try:
        current = KeyPair(data[PRIVATE_KEY], data[PUBLIC_KEY])
        trust = data[AUTHORIZED_KEYS]
    except KeyError:
        return None
    nxt = None
    if {NEXT + PRIVATE_KEY, NEXT + PUBLIC_KEY} <= data.keys():
        nxt = KeyPair(data[NEXT + PRIVATE_KEY], data[NEXT + PUBLIC_KEY])
    if phase is Phase.TRUSTING and nxt is None:
        return None
    return MpiKeyState(phase, since, rotation, trust, current, nxt)


def adopt_mpi_keys_secret(secret: Manifest, requested: str, now: datetime) -> MpiKeyState | None:
    """The state of a Secret the cluster does not own (see the module docstring): what it
    holds if it was rendered above, else its key pair, trusted alone, as of ``now``; None
    if it holds no key pair (someone else's Secret, never to be overwritten)."""
    rendered = parse_mpi_keys_secret(secret)
    if rendered is not None:
        return rendered
    data = decoded_data(secret)
    # A Secret's type cannot change, and the rendered one is Opaque (as kubectl makes it).
    if secret.get("type", "Opaque") != "Opaque" or not {PRIVATE_KEY, PUBLIC_KEY} <= data.keys():
        return None
    pair = KeyPair(data[PRIVATE_KEY], data[PUBLIC_KEY])
    return MpiKeyState(Phase.STABLE, now, requested, authorized(pair), pair)


def owned_by(secret: Manifest, uid: str | None) -> bool:
    refs = secret.get("metadata", {}).get("ownerReferences") or ()
    return uid is not None and any(ref.get("uid") == uid for ref in refs)
