#!/usr/bin/env bash
# An S3-compatible server for raynb's storage tests: SeaweedFS's `weed` (Apache-2.0; its S3 gateway), built from the
# Go module proxy like the Kubernetes stack, cached in $RAYNB_K8S_CACHE (default ~/.cache/raynb-k8s).
#
#   tests/s3/build.sh        # build once (minutes on 2 cores; seconds when cached)
#   tests/s3/build.sh bin    # print the folder that holds `weed`
set -euo pipefail

# The newest version the Go module proxy here serves (a pseudo-version of the main branch, 2026-11-09).
SEAWEEDFS_VERSION=${SEAWEEDFS_VERSION:-v0.0.0-20261109003541-7506e5f91cd6}
CACHE=${RAYNB_K8S_CACHE:-$HOME/.cache/raynb-k8s}
BIN="$CACHE/bin/seaweedfs-$SEAWEEDFS_VERSION"

log() { printf '[s3] %s\n' "$*" >&2; }

build() {
  if [ -x "$BIN/weed" ]; then log "weed already built in $BIN"; return 0; fi
  command -v go >/dev/null || { log "Go is not installed: the S3 storage tests need it to build SeaweedFS"; return 3; }
  local t0=$SECONDS wrap="$CACHE/src/seaweedfs-wrapper-$SEAWEEDFS_VERSION"
  mkdir -p "$BIN" "$wrap"
  export GOFLAGS=-mod=mod GOTOOLCHAIN=${GOTOOLCHAIN:-auto}
  # Its go.mod has a replace directive, so `go install pkg@version` refuses it: build it from a wrapper module that
  # carries the same replace lines.
  cd "$wrap"
  if [ ! -f go.mod ]; then
    go mod init raynb.local/seaweedfswrap >/dev/null 2>&1
    local gomod; gomod=$(go mod download -json "github.com/seaweedfs/seaweedfs@$SEAWEEDFS_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
    grep -E '^replace ' "$gomod" >> go.mod || true
    printf '//go:build tools\n\npackage tools\n\nimport _ "github.com/seaweedfs/seaweedfs/weed"\n' > tools.go
    go get "github.com/seaweedfs/seaweedfs@$SEAWEEDFS_VERSION" >/dev/null
  fi
  go build -ldflags "-s -w" -o "$BIN/weed" github.com/seaweedfs/seaweedfs/weed
  log "weed built in $((SECONDS - t0)) s"
}

case "${1:-build}" in
  build) build ;;
  bin) echo "$BIN" ;;
  *) echo "usage: $0 [build|bin]" >&2; exit 2 ;;
esac
