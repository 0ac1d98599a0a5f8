#!/usr/bin/env bash
# Builds Jaeger (the v2 binary, `cmd/jaeger`: OTLP receiver, in-memory storage, query API)
# from Go modules into tests/tracing/bin/jaeger, for the trace e2e test.
#
# Kept apart from tests/cluster/build.sh on purpose: its stamp covers only its own files,
# so adding or bumping Jaeger never invalidates the cached Kubernetes build.
#
# Idempotent: when the stamp (hash of go.mod/go.sum, this script, the shared cache helper
# and the Go version) matches and the binary exists, it does nothing. Every checkout on a
# machine shares the last build through a cache keyed by the stamp ($TANDEM_BUILD_CACHE,
# default ~/.cache/tandem; tests/lib/build-cache.sh), so a fresh clone of an unchanged
# tests/tracing copies the binary.
#
#   tests/tracing/build-jaeger.sh           build if needed
#   tests/tracing/build-jaeger.sh --force   rebuild regardless of the stamp
#
# Another version: in tests/tracing, `go get -tool github.com/jaegertracing/jaeger/cmd/jaeger@V`
# (GOFLAGS= GOTOOLCHAIN=local), then set JAEGER_VERSION below to V. A cold build takes about
# 440 CPU-seconds (~4 minutes of 2 idle cores, plus ~1.2 GB of module downloads).
set -euo pipefail

JAEGER_VERSION=v1.75.0

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BIN="$HERE/bin"
STAMP="$HERE/.stamp"
CACHE_NAME=jaeger-bin
OUTPUTS=(jaeger)

# shellcheck source=../lib/build-cache.sh
source "$HERE/../lib/build-cache.sh"
start_go_build jaeger-build "$@"

exit_if_built "$JAEGER_VERSION"

require_pin github.com/jaegertracing/jaeger "$JAEGER_VERSION"

begin_build

# Upstream's Makefile stamps these; without them `jaeger version` reports nothing useful.
pkg=github.com/jaegertracing/jaeger/internal/version
ldflags="-s -w -X $pkg.latestVersion=$JAEGER_VERSION -X $pkg.date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"

log "building jaeger $JAEGER_VERSION ($GO_VERSION)"
(cd "$HERE" && go build -ldflags "$ldflags" -o "$BIN/jaeger" \
  github.com/jaegertracing/jaeger/cmd/jaeger) || die "jaeger build failed"
log "  jaeger: $("$BIN/jaeger" version 2>&1 | head -n1)"

record_build "$want"
log "done in $((SECONDS - started))s"
