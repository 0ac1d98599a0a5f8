"""Keys and certificates for the dev cluster, made with the ``openssl`` command line.

The ``cryptography`` package is not a Tandem dependency and the openssl CLI is on every
Linux/macOS machine, so we shell out. Three artefacts:

- a throwaway CA and an apiserver serving certificate it signs (so clients verify TLS
  instead of skipping verification),
- one RSA key that the apiserver uses both to sign and to verify ServiceAccount tokens
  and the controller manager uses to mint them.
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
_VALID_DAYS = 3650


@dataclass(frozen=True, slots=True)
class Pki:
    ca_cert: Path
    serving_cert: Path
    serving_key: Path
    service_account_key: Path


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
            "",
        ]
    )


def create_pki(directory: Path) -> Pki:
    """Generate a fresh CA, serving certificate and ServiceAccount key in ``directory``."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("the openssl command line tool is required to start the dev cluster")
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "openssl.cnf"
    config.write_text(render_openssl_config(_SERVING_IPS, _SERVING_DNS))
    pki = Pki(
        ca_cert=directory / "ca.crt",
        serving_cert=directory / "apiserver.crt",
        serving_key=directory / "apiserver.key",
        service_account_key=directory / "sa.key",
    )
    ca_key = directory / "ca.key"
    csr = directory / "apiserver.csr"
    days = f"-days {_VALID_DAYS}"
    _openssl(
        openssl,
        f"req -x509 -extensions v3_ca -newkey rsa:2048 -nodes {days} -subj /CN=tandem-dev-ca",
        {"-config": config, "-keyout": ca_key, "-out": pki.ca_cert},
    )
    _openssl(
        openssl,
        "req -new -newkey rsa:2048 -nodes -subj /CN=kube-apiserver",
        {"-config": config, "-keyout": pki.serving_key, "-out": csr},
    )
    _openssl(
        openssl,
        f"x509 -req -CAcreateserial -extensions v3_serving {days}",
        {
            "-in": csr,
            "-CA": pki.ca_cert,
            "-CAkey": ca_key,
            "-extfile": config,
            "-out": pki.serving_cert,
        },
    )
    _openssl(
        openssl,
        "genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048",
        {"-out": pki.service_account_key},
    )
    return pki


def _openssl(openssl: str, options: str, files: Mapping[str, Path]) -> None:
    """Run ``openssl <options>`` plus ``<flag> <path>`` pairs; paths stay single arguments
    even when they contain spaces."""
    argv = [openssl, *options.split()]
    for flag, path in files.items():
        argv += [flag, str(path)]
    result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    if result.returncode != 0:
        raise RuntimeError(f"openssl {options} failed: {result.stderr.strip()}")
