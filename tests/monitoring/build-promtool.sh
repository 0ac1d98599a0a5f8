#!/usr/bin/env bash
# Builds promtool (github.com/prometheus/prometheus/cmd/promtool, pinned in this
# directory's go.mod) into tests/monitoring/bin/, and copies the prometheus-operator CRDs
# the chart's monitoring objects must satisfy (PodMonitor, ServiceMonitor,
# PrometheusRule) from the pinned prometheus-operator module into tests/monitoring/bin/crds/.
# tests/unit/chart/test_monitoring.py uses both.
#
# Idempotent: when the stamp (hash of go.mod/go.sum, this script, the shared cache helper,
# the versions and the Go version) matches and every output exists, it does nothing. A cold
# build (empty Go module and build caches) took 9.5 minutes on 2 cores shared with another
# Go build (about a minute of it downloading modules); every checkout on a machine shares
# the last build through a cache keyed by the stamp ($TANDEM_BUILD_CACHE, default
# ~/.cache/tandem; tests/lib/build-cache.sh), so a fresh clone copies promtool instead of
# building it.
#
#   tests/monitoring/build-promtool.sh           build if needed
#   tests/monitoring/build-promtool.sh --force   rebuild regardless of the stamp
set -euo pipefail

PROMETHEUS_VERSION=v0.316.0 # Prometheus 3.16's Go module version
# The newest prometheus-operator release the Go proxy reachable here serves, and its hash
# (go.sum's h1:) so that the CRDs are exactly that release's.
PROMETHEUS_OPERATOR_VERSION=v0.85.0
PROMETHEUS_OPERATOR_SUM="h1:M5xLCLEoaW2IJfnuCwFzzpL+jSVQu3KGT84Pye+fW8s="
CRDS=(podmonitors servicemonitors prometheusrules)
# Service discovery plugins promtool never needs here (cloud providers' SDKs): the build
# is about half as long without them. Kubernetes and file discovery stay in.
BUILD_TAGS=remove_all_sd

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BIN="$HERE/bin"
STAMP="$HERE/.stamp"
CACHE_NAME=promtool-bin

OUTPUTS=(promtool)
for crd in "${CRDS[@]}"; do
  OUTPUTS+=("crds/monitoring.coreos.com_$crd.yaml")
done

# shellcheck source=../lib/build-cache.sh
source "$HERE/../lib/build-cache.sh"
start_go_build promtool-build "$@"

exit_if_built "$PROMETHEUS_VERSION" "$PROMETHEUS_OPERATOR_VERSION" "$BUILD_TAGS"

require_pin github.com/prometheus/prometheus "$PROMETHEUS_VERSION"

begin_build
mkdir -p "$BIN/crds"

# The version promtool prints (upstream's Makefile stamps it through promu).
version_pkg=github.com/prometheus/common/version
ldflags="-s -w -X $version_pkg.Version=${PROMETHEUS_VERSION#v} -X $version_pkg.Branch=HEAD"
ldflags+=" -X $version_pkg.BuildUser=tandem -X $version_pkg.BuildDate=$(date -u +%Y%m%d-%H:%M:%S)"
log "building promtool $PROMETHEUS_VERSION ($GO_VERSION, tags $BUILD_TAGS)"
(cd "$HERE" && go build -tags "$BUILD_TAGS" -ldflags "$ldflags" -o "$BIN/promtool" \
  github.com/prometheus/prometheus/cmd/promtool) || die "promtool build failed"

# The CRDs: the module is not a dependency of anything built here, so it is downloaded
# on its own (GOFLAGS= lets `go mod download` name a module go.mod does not require) and
# checked against the pinned hash.
module=github.com/prometheus-operator/prometheus-operator
info="$(cd "$HERE" && GOFLAGS= go mod download -json "$module@$PROMETHEUS_OPERATOR_VERSION")" ||
  die "go mod download $module@$PROMETHEUS_OPERATOR_VERSION failed: $info"
sum="$(sed -n 's/.*"Sum": "\(.*\)".*/\1/p' <<<"$info")"
dir="$(sed -n 's/.*"Dir": "\(.*\)".*/\1/p' <<<"$info")"
[[ "$sum" == "$PROMETHEUS_OPERATOR_SUM" ]] ||
  die "$module@$PROMETHEUS_OPERATOR_VERSION has hash $sum, expected $PROMETHEUS_OPERATOR_SUM"
for crd in "${CRDS[@]}"; do
  src="$dir/example/prometheus-operator-crd/monitoring.coreos.com_$crd.yaml"
  [[ -f "$src" ]] || die "$src not found"
  cp "$src" "$BIN/crds/"
  chmod u+w "$BIN/crds/monitoring.coreos.com_$crd.yaml"
done
log "copied the ${CRDS[*]} CRDs from $module@$PROMETHEUS_OPERATOR_VERSION"

log "  $("$BIN/promtool" --version 2>&1 | head -n1)"
record_build "$want"
log "done in $((SECONDS - started))s"
