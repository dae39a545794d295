#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, etcd, kubectl and the
# kfaws-testenv harness from this Go module into a cache directory outside the
# clone, once per pinned dependency set.
#
# Output: the last line on stdout is the directory holding the five binaries,
#   ${KFAWS_CACHE:-$HOME/.cache/kfaws}/bin/apiserver-<hash>/
# where <hash> covers go.mod, go.sum, the server, controller-manager and kubectl
# main packages, the Go version and the build flags below. When that directory
# is complete they are not rebuilt (a warm run takes about a second). The
# harness is rebuilt on every call because it is small and cached by Go itself.
#
# Environment: KFAWS_CACHE (cache root), GOPROXY as usual. The module and build
# caches live under the cache root too (GOMODCACHE, GOCACHE), so a clean clone
# never writes into $HOME/go. Without a Go >= 1.21 in PATH, Go $bootstrap_go is
# fetched from the module proxy as the golang.org/toolchain module (needs
# curl, unzip). Concurrent callers serialise on a lock file; the build runs
# under `nice` because it is heavy (cold: about 15 minutes and 2.5 GB on 2 cores).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${KFAWS_CACHE:-$HOME/.cache/kfaws}
export GOMODCACHE=$cache/go/mod
export GOCACHE=$cache/go/build
export GOFLAGS="-mod=readonly -buildvcs=false -trimpath"

# The toolchain used when none is installed: the version and the SHA-256 of
# proxy.golang.org/golang.org/toolchain/@v/v0.0.1-go$bootstrap_go.linux-amd64.zip.
bootstrap_go=1.26.8
bootstrap_sha256=30c2b1bf7dcc88d3eb0a1364e47ddd9128edb3110a30e8a0ef61cd5856b31de7

mkdir -p "$cache/bin"
exec 9>"$cache/bin/.build.lock"
flock 9

# go_usable: a go in PATH that understands GOTOOLCHAIN (1.21+), which then
# fetches the toolchain go.mod asks for by itself.
go_usable() {
  local v
  v=$(go env GOVERSION 2>/dev/null) || return 1
  v=${v#go}
  [[ $(printf '%s\n' 1.21 "$v" | sort -V | head -n1) == 1.21 ]]
}

if ! go_usable; then
  root=$cache/go/toolchain/go$bootstrap_go
  if [[ ! -x $root/bin/go ]]; then
    [[ $(uname -s)/$(uname -m) == Linux/x86_64 ]] || {
      echo "build.sh: no Go >= 1.21 in PATH, and the pinned bootstrap toolchain is linux-amd64 only" >&2
      exit 1
    }
    proxy=${GOPROXY:-https://proxy.golang.org}
    proxy=${proxy%%[,|]*}
    mkdir -p "$cache/go/toolchain"
    zip=$(mktemp "$cache/go/toolchain/.download.XXXXXX")
    echo "build.sh: no Go >= 1.21 in PATH; fetching go$bootstrap_go from $proxy" >&2
    curl -sSfL -o "$zip" "$proxy/golang.org/toolchain/@v/v0.0.1-go$bootstrap_go.linux-amd64.zip"
    echo "$bootstrap_sha256  $zip" | sha256sum -c --quiet - || { rm -f "$zip"; echo "build.sh: toolchain checksum mismatch" >&2; exit 1; }
    tmp=$(mktemp -d "$cache/go/toolchain/.unpack.XXXXXX")
    unzip -q "$zip" -d "$tmp"
    rm -rf "$root"
    mv "$tmp/golang.org/toolchain@v0.0.1-go$bootstrap_go.linux-amd64" "$root"
    rm -rf "$tmp" "$zip"
  fi
  export PATH=$root/bin:$PATH
fi

# The pinned release; also stamped into /version so clients see a real version.
k8s_version=$(awk '$1 == "k8s.io/kubernetes" { print $2; exit }' "$here/go.mod")
k8s_minor=$(echo "$k8s_version" | cut -d. -f2)
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$k8s_minor"
  ldflags+=" -X $pkg.gitTreeState=clean"
done

cd "$here"
stamp=$( {
  cat go.mod go.sum cmd/kube-apiserver/*.go cmd/kube-controller-manager/*.go cmd/etcd/*.go cmd/kubectl/*.go
  go env GOVERSION GOOS GOARCH
  echo "$GOFLAGS $ldflags"
} | sha256sum | cut -c1-16)
out=$cache/bin/apiserver-$stamp

build() { # build <package> <binary name>
  local tmp
  tmp=$(mktemp "$out/.$2.XXXXXX")
  nice -n 10 go build -ldflags "$ldflags" -o "$tmp" "$1"
  mv -f "$tmp" "$out/$2"
}

mkdir -p "$out"
if [[ ! -f $out/.complete ]]; then
  echo "build.sh: building kube-apiserver $k8s_version, kube-controller-manager, kubectl and etcd into $out (cold: about 15 minutes)" >&2
  build ./cmd/etcd etcd
  build ./cmd/kube-apiserver kube-apiserver
  build ./cmd/kube-controller-manager kube-controller-manager
  build ./cmd/kubectl kubectl
  touch "$out/.complete"
fi
build ./cmd/kfaws-testenv kfaws-testenv
echo "$out"
