# Sourced by the Go build scripts of tests/ (not run on its own): their common start, the
# stamp check and the per-machine cache they share. A build script sets, before sourcing:
#   HERE     its directory (go.mod and go.sum there);  BIN  its output directory;
#   STAMP    its stamp file;  OUTPUTS  the files under $BIN it makes (relative paths)
#   CACHE_NAME  its folder under $TANDEM_BUILD_CACHE (default ~/.cache/tandem)
# then calls, in order: start_go_build NAME "$@" (log/die, --force, the Go toolchain),
# exit_if_built STAMP_INPUTS... (done when the stamp matches or the cache has the build),
# require_pin MODULE VERSION, begin_build, ... its go build ..., record_build "$want".
# Every checkout on a machine then shares the last build: a fresh clone whose stamp
# matches copies the outputs instead of building them.

log() { printf '%s: %s\n' "$BUILD_NAME" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# Never let go silently download a newer toolchain; modules only as go.mod/go.sum pin them.
start_go_build() { # name script-args...
  BUILD_NAME=$1
  shift
  export GOTOOLCHAIN=local
  export GOFLAGS=-mod=readonly
  export PATH="/usr/local/go/bin:$PATH"
  FORCE=0
  case "${1:-}" in
    --force) FORCE=1 ;;
    "") ;;
    *) die "unknown argument: $1 (usage: $(basename "$0") [--force])" ;;
  esac
  command -v go >/dev/null || die "go not found (expected /usr/local/go/bin/go)"
  GO_VERSION="$(go env GOVERSION)"
}

# Sets $want, the stamp: a hash of go.mod, go.sum, the calling script, this file, the
# words given (versions, build tags) and the Go version. Exits when it is current.
exit_if_built() { # words...
  want="$(
    cat "$HERE/go.mod" "$HERE/go.sum" "$0" "${BASH_SOURCE[0]}"
    echo "$* $GO_VERSION"
  )"
  want="$(sha256sum <<<"$want" | cut -d' ' -f1)"
  exit_if_current "$want" "$FORCE"
}

# go.mod is the source of truth; refuse to build if it drifted from the version the
# script stamps into its outputs.
require_pin() { # module version
  local got
  got="$(cd "$HERE" && go list -m -f '{{.Version}}' "$1")"
  [[ "$got" == "$2" ]] || die "go.mod pins $1 at $got, $(basename "$0") expects $2"
}

begin_build() {
  mkdir -p "$BIN"
  rm -f "$STAMP"
  started=$SECONDS
}

all_outputs_exist() {
  local f
  for f in "${OUTPUTS[@]}"; do
    [[ -s "$BIN/$f" ]] || return 1
  done
}

BUILD_CACHE="${TANDEM_BUILD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tandem}/$CACHE_NAME"

# Hard links where the cache shares the checkout's filesystem, copies elsewhere.
copy_outputs() { # from to
  local f
  for f in "${OUTPUTS[@]}"; do
    mkdir -p "$(dirname "$2/$f")"
    rm -f "$2/$f"
    cp -l "$1/$f" "$2/$f" 2>/dev/null || cp -p "$1/$f" "$2/$f"
  done
}

# Exits the calling script (status 0) when the stamp $1 matches and every output exists,
# or when the cache holds a complete build of that stamp; returns otherwise.
exit_if_current() { # stamp force
  if [[ $2 -eq 0 && -f "$STAMP" && "$(cat "$STAMP")" == "$1" ]] && all_outputs_exist; then
    log "up to date (stamp $1), nothing to do"
    exit 0
  fi
  if [[ $2 -eq 0 && -f "$BUILD_CACHE/$1/.complete" ]]; then
    rm -f "$STAMP"
    copy_outputs "$BUILD_CACHE/$1" "$BIN"
    if all_outputs_exist; then
      echo "$1" >"$STAMP"
      log "restored from $BUILD_CACHE/$1 (stamp $1), nothing to build"
      exit 0
    fi
  fi
}

# After a successful build: write the stamp and keep the build for other checkouts of
# this machine (only the newest stamp's).
record_build() { # stamp
  echo "$1" >"$STAMP"
  if mkdir -p "$BUILD_CACHE" 2>/dev/null; then
    find "$BUILD_CACHE" -mindepth 1 -maxdepth 1 -type d ! -name "$1" -exec rm -rf {} +
    copy_outputs "$BIN" "$BUILD_CACHE/$1" && touch "$BUILD_CACHE/$1/.complete"
  fi
}
