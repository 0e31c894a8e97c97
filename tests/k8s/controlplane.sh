#!/usr/bin/env bash
# A real Kubernetes control plane on 127.0.0.1 without Docker, for raynb's Kubernetes tests.
#
#   tests/k8s/controlplane.sh build   # build the binaries once into $RAYNB_K8S_CACHE (default ~/.cache/raynb-k8s)
#   tests/k8s/controlplane.sh up DIR  # start etcd, kube-apiserver, controller-manager, scheduler, kwok, KubeRay in DIR
#   tests/k8s/controlplane.sh down DIR
#
# Components (all real, built from published Go modules): kube-apiserver, kube-controller-manager and kube-scheduler
# from k8s.io/kubernetes, etcd from go.etcd.io/etcd/server/v3 (the version Kubernetes itself pins), kwok (fake kubelets:
# nodes and pods), and the KubeRay operator. Nothing is downloaded at run time once `build` has run.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.36.3}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
# v1.7.0 is what the issue names, but the Go module proxy here refuses its zip (403); v1.6.1 is the newest it serves.
KUBERAY_VERSION=${KUBERAY_VERSION:-v1.6.1}
CACHE=${RAYNB_K8S_CACHE:-$HOME/.cache/raynb-k8s}
BIN="$CACHE/bin/k8s-$K8S_VERSION-kwok-$KWOK_VERSION-kuberay-$KUBERAY_VERSION"
HERE=$(cd "$(dirname "$0")" && pwd)

log() { printf '[controlplane] %s\n' "$*" >&2; }

build() {
  if [ -x "$BIN/kube-apiserver" ] && [ -x "$BIN/etcd" ] && [ -x "$BIN/kwok" ] && [ -x "$BIN/ray-operator" ] \
     && [ -x "$BIN/kube-scheduler" ] && [ -x "$BIN/kube-controller-manager" ]; then
    log "binaries already built in $BIN"; return 0
  fi
  command -v go >/dev/null || { log "Go is not installed: the Kubernetes tests need it to build the control plane"; return 3; }
  local t0=$SECONDS wrap="$CACHE/src/wrapper-$K8S_VERSION"
  mkdir -p "$BIN" "$wrap"
  export GOFLAGS=-mod=mod GOTOOLCHAIN=${GOTOOLCHAIN:-auto}
  # kwok and KubeRay are plain `go install`s; the Kubernetes binaries need a wrapper module (see k8s-test-stack.md).
  ( GOBIN="$BIN" go install "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" && log "kwok built" ) &
  local p1=$!
  ( GOBIN="$BIN" go install "github.com/ray-project/kuberay/ray-operator@$KUBERAY_VERSION" && log "ray-operator built" ) &
  local p2=$!
  wait $p1 || { log "kwok build failed"; return 1; }; wait $p2 || { log "ray-operator build failed"; return 1; }
  local minor=${K8S_VERSION#v1.}; minor=${minor%%.*}; local patch=${K8S_VERSION##*.}
  local gomod; gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
  cd "$wrap"
  if [ ! -f go.mod ]; then
    go mod init raynb.local/k8swrap >/dev/null 2>&1
    # every `k8s.io/X => ./staging/src/k8s.io/X` in kubernetes' go.mod becomes `k8s.io/X => k8s.io/X v0.<minor>.<patch>`
    grep -E '^\s*k8s.io/[a-z0-9-]+ => ./staging' "$gomod" | awk -v v="v0.$minor.$patch" '{print "replace " $1 " => " $1 " " v}' >> go.mod
    mkdir -p etcd && cat > etcd/main.go <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
    cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
GO
    go get "k8s.io/kubernetes@$K8S_VERSION" go.etcd.io/etcd/server/v3 >/dev/null
  fi
  local ld="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
  go build -ldflags "$ld" -o "$BIN/etcd" ./etcd
  log "etcd built"
  for c in kube-apiserver kube-scheduler kube-controller-manager; do
    go build -ldflags "$ld" -o "$BIN/$c" "k8s.io/kubernetes/cmd/$c"
    log "$c built"
  done
  log "build done in $((SECONDS - t0)) s"
}

case "${1:-}" in
  build) build ;;
  bin) echo "$BIN" ;;
  *) echo "usage: $0 build|up DIR|down DIR|bin" >&2; exit 2 ;;
esac
