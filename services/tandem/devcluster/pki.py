"""Keys and certificates for the dev cluster, made with the ``openssl`` command line.

The ``cryptography`` package is not a Tandem dependency and the openssl CLI is on every
Linux/macOS machine, so we shell out. The artefacts:

- a throwaway CA and an apiserver serving certificate it signs (so clients verify TLS
  instead of skipping verification),
- one RSA key that the apiserver uses both to sign and to verify ServiceAccount tokens
  and the controller manager uses to mint them,
- serving certificates for webhooks the apiserver calls on 127.0.0.1 (LeaderWorkerSet's),
- with a real node, serving certificates for its kubelet and for kwok (which serves the
  kubelet API of the simulated nodes), and the client certificate the apiserver shows
  them: the kubelet accepts no other caller.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# 10.96.0.1 is the `kubernetes` Service IP in --service-cluster-ip-range=10.96.0.0/16;
# in-cluster clients would dial it by that name. Nothing here ever routes to it.
_SERVING_IPS = ("127.0.0.1", "10.96.0.1")
_SERVING_DNS = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc")
# The API server dials a real node's kubelet by its Hostname address, localhost.
_KUBELET_SANS = "IP:127.0.0.1, DNS:localhost"
_VALID_DAYS = 3650


@dataclass(frozen=True, slots=True)
class Pki:
    ca_cert: Path
    serving_cert: Path
    serving_key: Path
    service_account_key: Path


@dataclass(frozen=True, slots=True)
class KubeletPki:
    serving_cert: Path
    serving_key: Path
    # The apiserver's client certificate for kubelets (--kubelet-client-certificate).
    client_cert: Path
    client_key: Path
    # kwok serves the kubelet API of the simulated nodes; once the apiserver checks
    # kubelet certificates, kwok needs one of the CA's too.
    kwok_cert: Path
    kwok_key: Path


def render_openssl_config(ips: Sequence[str], dns_names: Sequence[str]) -> str:
    """An openssl config with the CA and serving-certificate extension sections."""
    alt_names = [f"IP:{ip}" for ip in ips] + [f"DNS:{name}" for name in dns_names]
    return "\n".join(
        [
            "[req]",
            "distinguished_name = dn",
            "prompt = no",
            "[dn]",
            "CN = tandem-devcluster",
            "[v3_ca]",
            "basicConstraints = critical, CA:TRUE",
            "keyUsage = critical, keyCertSign, cRLSign, digitalSignature",
            "subjectKeyIdentifier = hash",
            "[v3_serving]",
            "basicConstraints = critical, CA:FALSE",
            "keyUsage = critical, digitalSignature, keyEncipherment",
            "extendedKeyUsage = serverAuth",
            f"subjectAltName = {', '.join(alt_names)}",
            "authorityKeyIdentifier = keyid",
            "[v3_kubelet_serving]",
            "basicConstraints = critical, CA:FALSE",
            "keyUsage = critical, digitalSignature, keyEncipherment",
            "extendedKeyUsage = serverAuth",
            f"subjectAltName = {_KUBELET_SANS}",
            "authorityKeyIdentifier = keyid",
            "[v3_client]",
            "basicConstraints = critical, CA:FALSE",
            "keyUsage = critical, digitalSignature, keyEncipherment",
            "extendedKeyUsage = clientAuth",
            "authorityKeyIdentifier = keyid",
            "",
        ]
    )


def create_pki(directory: Path) -> Pki:
    """Generate a fresh CA, serving certificate and ServiceAccount key in ``directory``."""
    openssl = _find_openssl()
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "openssl.cnf"
    config.write_text(render_openssl_config(_SERVING_IPS, _SERVING_DNS))
    pki = Pki(
        ca_cert=directory / "ca.crt",
        serving_cert=directory / "apiserver.crt",
        serving_key=directory / "apiserver.key",
        service_account_key=directory / "sa.key",
    )
    _openssl(
        openssl,
        f"req -x509 -extensions v3_ca -newkey rsa:2048 -nodes -days {_VALID_DAYS} "
        "-subj /CN=tandem-dev-ca",
        {"-config": config, "-keyout": directory / "ca.key", "-out": pki.ca_cert},
    )
    _issue(
        openssl, directory, "v3_serving", "/CN=kube-apiserver", pki.serving_cert, pki.serving_key
    )
    _openssl(
        openssl,
        "genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048",
        {"-out": pki.service_account_key},
    )
    return pki


def create_kubelet_pki(directory: Path) -> KubeletPki:
    """Kubelet serving and apiserver-to-kubelet client certificates from the CA that
    :func:`create_pki` made in ``directory``."""
    openssl = _find_openssl()
    pki = KubeletPki(
        serving_cert=directory / "kubelet.crt",
        serving_key=directory / "kubelet.key",
        client_cert=directory / "apiserver-kubelet-client.crt",
        client_key=directory / "apiserver-kubelet-client.key",
        kwok_cert=directory / "kwok.crt",
        kwok_key=directory / "kwok.key",
    )
    serving = ("v3_kubelet_serving", "/CN=localhost", pki.serving_cert, pki.serving_key)
    _issue(openssl, directory, *serving)
    _issue(openssl, directory, "v3_kubelet_serving", "/CN=kwok", pki.kwok_cert, pki.kwok_key)
    # system:masters: the kubelet authorizes anyone it authenticates; the group only
    # matters should the kubelet ever delegate authorization to the apiserver.
    subject = "/O=system:masters/CN=kube-apiserver-kubelet-client"
    _issue(openssl, directory, "v3_client", subject, pki.client_cert, pki.client_key)
    return pki


def issue_serving_cert(directory: Path, subject: str, cert: Path, key: Path) -> None:
    """A serving certificate for 127.0.0.1 and localhost from the CA that :func:`create_pki`
    made in ``directory``: for a server the apiserver dials by URL (a webhook)."""
    _issue(_find_openssl(), directory, "v3_serving", subject, cert, key)


def _find_openssl() -> str:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("the openssl command line tool is required to start the dev cluster")
    return openssl


def _issue(
    openssl: str, directory: Path, extensions: str, subject: str, cert: Path, key: Path
) -> None:
    """A new key and a certificate for it signed by the CA in ``directory``."""
    csr = cert.with_suffix(".csr")
    _openssl(
        openssl,
        f"req -new -newkey rsa:2048 -nodes -subj {subject}",
        {"-config": directory / "openssl.cnf", "-keyout": key, "-out": csr},
    )
    _openssl(
        openssl,
        f"x509 -req -CAcreateserial -extensions {extensions} -days {_VALID_DAYS}",
        {
            "-in": csr,
            "-CA": directory / "ca.crt",
            "-CAkey": directory / "ca.key",
            "-extfile": directory / "openssl.cnf",
            "-out": cert,
        },
    )


def _openssl(openssl: str, options: str, files: Mapping[str, Path]) -> None:
    """Run ``openssl <options>`` plus ``<flag> <path>`` pairs; paths stay single arguments
    even when they contain spaces."""
    argv = [openssl, *options.split()]
    for flag, path in files.items():
        argv += [flag, str(path)]
    result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    if result.returncode != 0:
        raise RuntimeError(f"openssl {options} failed: {result.stderr.strip()}")
