#!/usr/bin/env bash
# Builds CoreDNS (github.com/coredns/coredns, pinned in this directory's go.mod) into
# tests/dns/bin/coredns: the cluster DNS of the dev cluster's real node, which pods
# resolve Services and LeaderWorkerSet members through (tandem.devcluster.dns).
#
# Kept apart from tests/cluster/build.sh and tests/lws/build-lws.sh: its stamp covers only
# its own files, so bumping CoreDNS never invalidates the other builds.
#
# Idempotent: when the stamp (hash of go.mod/go.sum, this script, the shared cache helper
# and the Go version) matches and the output exists, it does nothing; a fresh checkout
# copies a build of the same stamp from $TANDEM_BUILD_CACHE (default ~/.cache/tandem).
#
#   tests/dns/build-coredns.sh           build if needed
#   tests/dns/build-coredns.sh --force   rebuild regardless of the stamp
#
# Another version: in tests/dns, `go get -tool github.com/coredns/coredns@V` (GOFLAGS=
# GOTOOLCHAIN=local), then set COREDNS_VERSION below to V. v1.15.0 builds with Go 1.26.
set -euo pipefail

COREDNS_VERSION=v1.15.0

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BIN="$HERE/bin"
STAMP="$HERE/.stamp"
CACHE_NAME=coredns-bin
OUTPUTS=(coredns)
# shellcheck source=../lib/build-cache.sh
source "$HERE/../lib/build-cache.sh"
start_go_build coredns-build "$@"

exit_if_built "$COREDNS_VERSION"

require_pin github.com/coredns/coredns "$COREDNS_VERSION"

begin_build

log "building CoreDNS $COREDNS_VERSION ($GO_VERSION)"
(cd "$HERE" && go build -ldflags "-s -w" -o "$BIN/coredns" github.com/coredns/coredns) ||
  die "coredns build failed"
log "  $("$BIN/coredns" -version 2>&1 | head -n1)"

record_build "$want"
log "done in $((SECONDS - started))s"
