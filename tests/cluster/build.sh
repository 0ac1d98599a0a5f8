#!/usr/bin/env bash
# Builds the e2e control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kwok) and the kubelet of the real test node from Go modules into
# tests/cluster/bin/.
#
# Idempotent: when the stamp (hash of both go.mod/go.sum pairs, this script, the versions
# and the Go version) matches and every output exists, it does nothing. A cold build takes
# 15-25 minutes on 2 cores; with a warm ~/.cache/go-build it is about a minute. Every
# checkout on a machine shares the last build through a cache keyed by the stamp
# ($TANDEM_BUILD_CACHE, default ~/.cache/tandem), so a fresh clone of an unchanged
# tests/cluster copies its binaries instead of building them.
#
#   tests/cluster/build.sh           build if needed
#   tests/cluster/build.sh --force   rebuild regardless of the stamp
set -euo pipefail

K8S_VERSION=v1.36.3
ETCD_VERSION=v3.6.8 # what k8s.io/kubernetes v1.36.3 pins for go.etcd.io/etcd/client/v3
KWOK_VERSION=v0.8.0
# The LeaderWorkerSet CRD is optional: the Go proxy reachable here may refuse the module.
LWS_VERSION=v0.8.0

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BIN="$HERE/bin"
STAMP="$HERE/.stamp"
# Never let go silently download a newer toolchain; the pins above build with Go 1.26.
export GOTOOLCHAIN=local
export GOFLAGS=-mod=readonly
export PATH="/usr/local/go/bin:$PATH"

log() { printf 'cluster-build: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

FORCE=0
case "${1:-}" in
  --force) FORCE=1 ;;
  "") ;;
  *) die "unknown argument: $1 (usage: build.sh [--force])" ;;
esac

command -v go >/dev/null || die "go not found (expected /usr/local/go/bin/go)"
GO_VERSION="$(go env GOVERSION)"

OUTPUTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kwok kwok-stages.yaml)

compute_stamp() {
  {
    cat "$HERE/go.mod" "$HERE/go.sum" "$HERE/kwok/go.mod" "$HERE/kwok/go.sum" "$HERE/build.sh"
    echo "$K8S_VERSION $ETCD_VERSION $KWOK_VERSION $LWS_VERSION $GO_VERSION"
  } | sha256sum | cut -d' ' -f1
}

all_outputs_exist() {
  local f
  for f in "${OUTPUTS[@]}"; do
    [[ -s "$BIN/$f" ]] || return 1
  done
}

want="$(compute_stamp)"
if [[ $FORCE -eq 0 && -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]] && all_outputs_exist; then
  log "up to date (stamp $want), nothing to do"
  exit 0
fi

CACHE="${TANDEM_BUILD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tandem}/cluster-bin"
# Hard links where the cache shares the checkout's filesystem, copies elsewhere.
copy_outputs() { # from to
  mkdir -p "$2"
  local f
  for f in "${OUTPUTS[@]}" lws-crd.yaml; do
    [[ -e "$1/$f" ]] || continue
    rm -f "$2/$f"
    cp -l "$1/$f" "$2/$f" 2>/dev/null || cp -p "$1/$f" "$2/$f"
  done
}
if [[ $FORCE -eq 0 && -f "$CACHE/$want/.complete" ]]; then
  rm -f "$STAMP"
  copy_outputs "$CACHE/$want" "$BIN"
  if all_outputs_exist; then
    echo "$want" >"$STAMP"
    log "restored from $CACHE/$want (stamp $want), nothing to build"
    exit 0
  fi
fi

# The go.mod files are the source of truth; refuse to build if they drifted from the
# versions this script stamps into the binaries.
check_pin() { # dir module expected
  local got
  got="$(cd "$1" && go list -m -f '{{.Version}}' "$2")"
  [[ "$got" == "$3" ]] || die "$1/go.mod pins $2 at $got, build.sh expects $3"
}
check_pin "$HERE" k8s.io/kubernetes "$K8S_VERSION"
check_pin "$HERE" go.etcd.io/etcd/server/v3 "$ETCD_VERSION"
check_pin "$HERE/kwok" sigs.k8s.io/kwok "$KWOK_VERSION"

mkdir -p "$BIN"
rm -f "$STAMP"
started=$SECONDS

# Upstream's hack/lib/version.sh stamps these; without them every binary says
# v0.0.0-master, which breaks version-skew checks in clients such as kubectl and helm.
k8s_minor="${K8S_VERSION#v1.}"
k8s_minor="${k8s_minor%%.*}"
build_date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
k8s_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  k8s_ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$k8s_minor"
  k8s_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date"
done

log "building kube-apiserver, kube-controller-manager, kube-scheduler, kubelet $K8S_VERSION ($GO_VERSION)"
(cd "$HERE" && go build -ldflags "$k8s_ldflags" -o "$BIN/" \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler \
  k8s.io/kubernetes/cmd/kubelet) || die "kubernetes build failed"

# etcd's main package is the module root, so -o must name the file (it would be "v3").
log "building etcd $ETCD_VERSION"
(cd "$HERE" && go build -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=$ETCD_VERSION" \
  -o "$BIN/etcd" go.etcd.io/etcd/server/v3) || die "etcd build failed"

log "building kwok $KWOK_VERSION"
(cd "$HERE/kwok" && go build \
  -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}" \
  -o "$BIN/kwok" sigs.k8s.io/kwok/cmd/kwok) || die "kwok build failed"

# kwok refuses to start without Stage objects. Take them from the exact module version we
# built instead of committing copies; the harness prepends its KwokConfiguration.
kwok_dir="$(cd "$HERE/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
log "writing kwok stages from $kwok_dir"
stages_tmp="$BIN/kwok-stages.yaml.tmp"
: >"$stages_tmp"
for stage in node/fast/node-initialize.yaml \
  node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
  pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
  src="$kwok_dir/kustomize/stage/$stage"
  [[ -f "$src" ]] || die "kwok stage $stage not found in $kwok_dir"
  printf -- '---\n# from sigs.k8s.io/kwok@%s kustomize/stage/%s\n' "$KWOK_VERSION" "$stage" >>"$stages_tmp"
  cat "$src" >>"$stages_tmp"
done
mv "$stages_tmp" "$BIN/kwok-stages.yaml"

# Optional: the LeaderWorkerSet CRD for tests that need it (harness: --with-lws).
lws_crd="config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml"
if lws_dir="$(cd "$HERE" && GOFLAGS= go mod download -json "sigs.k8s.io/lws@$LWS_VERSION" 2>/dev/null |
  sed -n 's/.*"Dir": "\(.*\)".*/\1/p')" && [[ -n "$lws_dir" && -f "$lws_dir/$lws_crd" ]]; then
  log "copying LeaderWorkerSet CRD from sigs.k8s.io/lws@$LWS_VERSION"
  cp "$lws_dir/$lws_crd" "$BIN/lws-crd.yaml"
  chmod u+w "$BIN/lws-crd.yaml"
else
  log "note: sigs.k8s.io/lws@$LWS_VERSION not downloadable; --with-lws will be unavailable"
  rm -f "$BIN/lws-crd.yaml"
fi

for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kwok; do
  log "  $b: $("$BIN/$b" --version 2>&1 | head -n1)"
done
echo "$want" >"$STAMP"
# Keep this build for other checkouts of this machine (only the newest stamp's).
if mkdir -p "$CACHE" 2>/dev/null; then
  find "$CACHE" -mindepth 1 -maxdepth 1 -type d ! -name "$want" -exec rm -rf {} +
  copy_outputs "$BIN" "$CACHE/$want" && touch "$CACHE/$want/.complete"
fi
log "done in $((SECONDS - started))s"
