#!/usr/bin/env bash
# Points go.mod at a Kubernetes release: rewrites the `replace` block from the `=> ./staging`
# lines of k8s.io/kubernetes's own go.mod at that version (each staging module k8s.io/X
# becomes k8s.io/X v0.<minor>.<patch>), then re-pins the tools. Generated, never guessed.
#
#   tests/cluster/gen-replaces.sh v1.36.3
#
# Afterwards update K8S_VERSION (and ETCD_VERSION if Kubernetes moved its etcd client pin)
# in build.sh, and commit go.mod and go.sum.
set -euo pipefail

version="${1:?usage: gen-replaces.sh vMAJOR.MINOR.PATCH}"
staging="v0.${version#v1.}"
cd "$(dirname "${BASH_SOURCE[0]}")"
export GOTOOLCHAIN=local GOFLAGS=-mod=mod
export PATH="/usr/local/go/bin:$PATH"

upstream="$(go mod download -json "k8s.io/kubernetes@$version" |
  sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
[[ -f "$upstream" ]] || { echo "cannot download k8s.io/kubernetes@$version" >&2; exit 1; }
modules="$(awk '$2 == "=>" && $3 ~ /^\.\/staging\// {print $1}' "$upstream")"
[[ -n "$modules" ]] || { echo "no staging replaces in $upstream" >&2; exit 1; }

for old in $(go mod edit -json | sed -n 's/.*"Path": "\(k8s\.io\/[^"]*\)".*/\1/p' | sort -u); do
  go mod edit -dropreplace="$old"
done
# One block, written by hand: `go mod edit -replace` would add 33 separate statements.
{
  echo
  echo "replace ("
  for module in $modules; do
    printf '\t%s => %s %s\n' "$module" "$module" "$staging"
  done
  echo ")"
} >>go.mod
go mod edit -fmt
echo "replaced $(wc -w <<<"$modules") staging modules with $staging" >&2

etcd="$(awk '$1 == "go.etcd.io/etcd/client/v3" {print $2}' "$upstream")"
go get -tool "k8s.io/kubernetes/cmd/kube-apiserver@$version" \
  "k8s.io/kubernetes/cmd/kube-controller-manager@$version" \
  "k8s.io/kubernetes/cmd/kube-scheduler@$version" \
  "go.etcd.io/etcd/server/v3@$etcd"
echo "k8s.io/kubernetes $version, etcd $etcd (its go.etcd.io/etcd/client/v3 pin)" >&2
