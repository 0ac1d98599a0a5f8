#!/usr/bin/env bash
# Builds Jaeger (the v2 binary, `cmd/jaeger`: OTLP receiver, in-memory storage, query API)
# from Go modules into tests/tracing/bin/jaeger, for the trace e2e test.
#
# Kept apart from tests/cluster/build.sh on purpose: its stamp covers only its own files,
# so adding or bumping Jaeger never invalidates the cached Kubernetes build.
#
# Idempotent: when the stamp (hash of go.mod/go.sum, this script and the Go version)
# matches and the binary exists, it does nothing. Every checkout on a machine shares the
# last build through a cache keyed by the stamp ($TANDEM_BUILD_CACHE, default
# ~/.cache/tandem), so a fresh clone of an unchanged tests/tracing copies the binary.
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
# Never let go silently download a newer toolchain; the pin above builds with Go 1.26.
export GOTOOLCHAIN=local
export GOFLAGS=-mod=readonly
export PATH="/usr/local/go/bin:$PATH"

log() { printf 'jaeger-build: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

FORCE=0
case "${1:-}" in
  --force) FORCE=1 ;;
  "") ;;
  *) die "unknown argument: $1 (usage: build-jaeger.sh [--force])" ;;
esac

command -v go >/dev/null || die "go not found (expected /usr/local/go/bin/go)"
GO_VERSION="$(go env GOVERSION)"

compute_stamp() {
  {
    cat "$HERE/go.mod" "$HERE/go.sum" "$HERE/build-jaeger.sh"
    echo "$JAEGER_VERSION $GO_VERSION"
  } | sha256sum | cut -d' ' -f1
}

want="$(compute_stamp)"
if [[ $FORCE -eq 0 && -f "$STAMP" && "$(cat "$STAMP")" == "$want" && -s "$BIN/jaeger" ]]; then
  log "up to date (stamp $want), nothing to do"
  exit 0
fi

CACHE="${TANDEM_BUILD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tandem}/jaeger-bin"
# A hard link where the cache shares the checkout's filesystem, a copy elsewhere.
copy_binary() { # from to
  mkdir -p "$2"
  rm -f "$2/jaeger"
  cp -l "$1/jaeger" "$2/jaeger" 2>/dev/null || cp -p "$1/jaeger" "$2/jaeger"
}
if [[ $FORCE -eq 0 && -f "$CACHE/$want/.complete" ]]; then
  rm -f "$STAMP"
  copy_binary "$CACHE/$want" "$BIN"
  if [[ -s "$BIN/jaeger" ]]; then
    echo "$want" >"$STAMP"
    log "restored from $CACHE/$want (stamp $want), nothing to build"
    exit 0
  fi
fi

# go.mod is the source of truth; refuse to build if it drifted from the version this
# script stamps into the binary.
got="$(cd "$HERE" && go list -m -f '{{.Version}}' github.com/jaegertracing/jaeger)"
[[ "$got" == "$JAEGER_VERSION" ]] ||
  die "go.mod pins github.com/jaegertracing/jaeger at $got, build-jaeger.sh expects $JAEGER_VERSION"

mkdir -p "$BIN"
rm -f "$STAMP"
started=$SECONDS

# Upstream's Makefile stamps these; without them `jaeger version` reports nothing useful.
pkg=github.com/jaegertracing/jaeger/internal/version
ldflags="-s -w -X $pkg.latestVersion=$JAEGER_VERSION -X $pkg.date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"

log "building jaeger $JAEGER_VERSION ($GO_VERSION)"
(cd "$HERE" && go build -ldflags "$ldflags" -o "$BIN/jaeger" \
  github.com/jaegertracing/jaeger/cmd/jaeger) || die "jaeger build failed"
log "  jaeger: $("$BIN/jaeger" version 2>&1 | head -n1)"

echo "$want" >"$STAMP"
# Keep this build for other checkouts of this machine (only the newest stamp's).
if mkdir -p "$CACHE" 2>/dev/null; then
  find "$CACHE" -mindepth 1 -maxdepth 1 -type d ! -name "$want" -exec rm -rf {} +
  copy_binary "$BIN" "$CACHE/$want" && touch "$CACHE/$want/.complete"
fi
log "done in $((SECONDS - started))s"
