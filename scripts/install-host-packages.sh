#!/usr/bin/env bash
# Debian packages the real test node and the image builds need: containerd + runc + CNI
# plugins (the node), iptables/conntrack/socat (kubelet, port-forward), buildah +
# debootstrap (images built from our Dockerfiles with a locally bootstrapped base), gcc +
# libc6-dev (the static pause binary).
# Idempotent: does nothing when every package is already installed. Needs root.
set -euo pipefail

PACKAGES=(
  containerd runc containernetworking-plugins
  iptables conntrack socat
  buildah debootstrap
  gcc libc6-dev
)

missing=()
for pkg in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$pkg")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

if [[ $(id -u) -ne 0 ]]; then
  echo "install-host-packages: need root to install: ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# Wait for another apt run (a parallel checkout installing the same list) instead of failing.
apt-get -o DPkg::Lock::Timeout=600 update -q
apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${missing[@]}"
# Debian starts containerd as a system service on install; the test node runs its own
# containerd (own socket, root and state), so the packaged one must not hold /run/containerd.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet containerd 2>/dev/null; then
  systemctl stop containerd || true
  systemctl disable containerd || true
fi
