#!/usr/bin/env bash
# Builds the LeaderWorkerSet controller (sigs.k8s.io/lws/cmd, pinned in this directory's
# go.mod) into tests/lws/bin/lws-controller, and copies from the same module what the dev
# cluster installs next to it: the CRDs (LeaderWorkerSet, DisaggregatedSet: the
# controller watches both), the controller's ClusterRole and its webhook configurations
# (rendered for a controller on 127.0.0.1 by tandem.devcluster.lws).
#
# Kept apart from tests/cluster/build.sh on purpose: its stamp covers only its own files,
# so bumping LWS never invalidates the cached Kubernetes build.
#
# Idempotent: when the stamp (hash of go.mod/go.sum, this script, the shared cache helper
# and the Go version) matches and every output exists, it does nothing; a fresh checkout
# copies a build of the same stamp from $TANDEM_BUILD_CACHE (default ~/.cache/tandem).
#
#   tests/lws/build-lws.sh           build if needed
#   tests/lws/build-lws.sh --force   rebuild regardless of the stamp
#
# Another version: in tests/lws, `go get -tool sigs.k8s.io/lws/cmd@V` (GOFLAGS=
# GOTOOLCHAIN=local), then set LWS_VERSION below to V. v0.9.0 is the newest release the
# Go proxy reachable here serves; it needs Go 1.26.0.
set -euo pipefail

LWS_VERSION=v0.9.0

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BIN="$HERE/bin"
STAMP="$HERE/.stamp"
CACHE_NAME=lws-bin
# Paths inside the sigs.k8s.io/lws module, copied to the same paths under $BIN.
MODULE_FILES=(
  config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml
  config/crd/bases/disaggregatedset.x-k8s.io_disaggregatedsets.yaml
  config/rbac/role.yaml
  config/webhook/manifests.yaml
  config/webhook/mutating-patch.yaml
  config/webhook/validating-patch.yaml
)
OUTPUTS=(lws-controller "${MODULE_FILES[@]}")
# shellcheck source=../lib/build-cache.sh
source "$HERE/../lib/build-cache.sh"
start_go_build lws-build "$@"

exit_if_built "$LWS_VERSION"

require_pin sigs.k8s.io/lws "$LWS_VERSION"

begin_build

# Upstream's Makefile stamps these; without them the controller logs v0.0.0-main.
pkg=sigs.k8s.io/lws/pkg/version
ldflags="-s -w -X $pkg.GitVersion=$LWS_VERSION -X $pkg.BuildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
log "building the LeaderWorkerSet controller $LWS_VERSION ($GO_VERSION)"
(cd "$HERE" && go build -ldflags "$ldflags" -o "$BIN/lws-controller" sigs.k8s.io/lws/cmd) ||
  die "lws build failed"

# The module go.sum verified: these files are exactly the release's.
dir="$(cd "$HERE" && go list -m -f '{{.Dir}}' sigs.k8s.io/lws)"
for f in "${MODULE_FILES[@]}"; do
  [[ -f "$dir/$f" ]] || die "$dir/$f not found"
  mkdir -p "$(dirname "$BIN/$f")"
  cp "$dir/$f" "$BIN/$f"
  chmod u+w "$BIN/$f"
done
log "copied the CRDs, ClusterRole and webhook configurations of sigs.k8s.io/lws@$LWS_VERSION"
log "  $("$BIN/lws-controller" --version 2>&1 | head -n1)"

record_build "$want"
log "done in $((SECONDS - started))s"
