#!/usr/bin/env bash
# Builds kube-apiserver, etcd and the kfaws-testenv harness from this Go module
# into a cache directory outside the clone, once per pinned dependency set.
#
# Output: the last line on stdout is the directory holding the three binaries,
#   ${KFAWS_CACHE:-$HOME/.cache/kfaws}/bin/apiserver-<hash>/
# where <hash> covers go.mod, go.sum, the two server main packages, the Go
# version and the build flags below. When that directory is complete the
# servers are not rebuilt (a warm run takes about a second). The harness is
# rebuilt on every call because it is small and cached by Go itself.
#
# Environment: KFAWS_CACHE (cache root), GOPROXY/GOFLAGS as usual. The module
# and build caches live under the cache root too (GOMODCACHE, GOCACHE), so a
# clean clone never writes into $HOME/go. Concurrent callers serialise on a
# lock file; the build runs under `nice` because it is heavy (see README.md).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${KFAWS_CACHE:-$HOME/.cache/kfaws}
export GOMODCACHE=$cache/go/mod
export GOCACHE=$cache/go/build
export GOFLAGS="-mod=readonly -buildvcs=false -trimpath"
# The pinned release; also stamped into /version so clients see a real version.
k8s_version=$(awk '$1 == "k8s.io/kubernetes" { print $2; exit }' "$here/go.mod")
k8s_minor=$(echo "$k8s_version" | cut -d. -f2)

command -v go >/dev/null || { echo "build.sh: 'go' not found in PATH (need Go >= 1.21; the toolchain named in go.mod is fetched through GOPROXY)" >&2; exit 1; }

ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$k8s_minor"
  ldflags+=" -X $pkg.gitTreeState=clean"
done

cd "$here"
stamp=$( {
  cat go.mod go.sum cmd/kube-apiserver/*.go cmd/etcd/*.go
  go env GOVERSION GOOS GOARCH
  echo "$GOFLAGS $ldflags"
} | sha256sum | cut -c1-16)
out=$cache/bin/apiserver-$stamp
mkdir -p "$cache/bin"

exec 9>"$cache/bin/.build.lock"
flock 9

build() { # build <package> <binary name>
  local tmp
  tmp=$(mktemp "$out/.$2.XXXXXX")
  nice -n 10 go build -ldflags "$ldflags" -o "$tmp" "$1"
  mv -f "$tmp" "$out/$2"
}

mkdir -p "$out"
if [[ ! -f $out/.complete ]]; then
  echo "build.sh: building kube-apiserver $k8s_version and etcd into $out (cold: tens of minutes)" >&2
  build ./cmd/etcd etcd
  build ./cmd/kube-apiserver kube-apiserver
  touch "$out/.complete"
fi
build ./cmd/kfaws-testenv kfaws-testenv
echo "$out"
