#!/usr/bin/env bash
# Print a directory holding kube-apiserver and etcd, building them once if needed.
#
# Order (ENVTEST.md): $KUBEBUILDER_ASSETS when it holds both binaries, else the cache
# under ${XDG_CACHE_HOME:-~/.cache}/flux-gate-admission/control-plane/v1.20.2, else build
# kube-apiserver from Debian's kubernetes source package (Go 1.19, GOPATH mode) and take
# etcd from Debian's etcd-server package. Progress goes to stderr; stdout is the directory.
set -euo pipefail

K8S_VERSION=v1.20.2
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/flux-gate-admission/control-plane/$K8S_VERSION"
log() { echo "control-plane: $*" >&2; }

if [[ -n "${KUBEBUILDER_ASSETS:-}" && -x "$KUBEBUILDER_ASSETS/kube-apiserver" && -x "$KUBEBUILDER_ASSETS/etcd" ]]; then
  echo "$KUBEBUILDER_ASSETS"; exit 0
fi
if [[ -x "$CACHE/kube-apiserver" && -x "$CACHE/etcd" ]]; then
  echo "$CACHE"; exit 0
fi

SUDO=""; [[ $(id -u) -eq 0 ]] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive

ensure_deb_src() {
  if ! grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ && ! grep -qs '^deb-src' /etc/apt/sources.list; then
    log "adding a deb-src entry for bookworm"
    $SUDO tee /etc/apt/sources.list.d/flux-gate-admission-src.sources >/dev/null <<SRC
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  fi
}

log "installing build packages (golang-go, etcd-server, reflect2)"
ensure_deb_src
$SUDO apt-get update -qq >&2
$SUDO apt-get install -y -qq golang-go etcd-server golang-github-modern-go-reflect2-dev dpkg-dev >&2

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
log "downloading the kubernetes source package"
apt-get source --download-only kubernetes >&2
ORIG=$(ls kubernetes_*.orig.tar.gz | head -n1)
export GOPATH="$WORK/gopath" GO111MODULE=off CGO_ENABLED=0 GOCACHE="$WORK/gocache"
SRC="$GOPATH/src/k8s.io/kubernetes"
mkdir -p "$SRC"
tar -xzf "$ORIG" -C "$SRC" --strip-components=1
cd "$SRC"

log "swapping vendored reflect2 1.0.1 for Debian's 1.0.2 (1.0.1 crashes under Go >= 1.18)"
rm -rf vendor/github.com/modern-go/reflect2
cp -r /usr/share/gocode/src/github.com/modern-go/reflect2 vendor/github.com/modern-go/reflect2
rm -f vendor/github.com/modern-go/reflect2/go.mod vendor/github.com/modern-go/reflect2/go.sum

log "generating pkg/generated/openapi"
go build -o "$WORK/openapi-gen" ./vendor/k8s.io/kube-openapi/cmd/openapi-gen
# vendor/k8s.io/* are symlinks into staging/: -R follows them (83 packages).
INPUTS=$(grep -Rl --include='*.go' '+k8s:openapi-gen=' pkg vendor/k8s.io \
  | grep -v -e '^vendor/k8s.io/code-generator/' -e '^vendor/k8s.io/sample-apiserver/' \
  | xargs -n1 dirname | sort -u | sed 's|^|k8s.io/kubernetes/|' | paste -sd, -)
"$WORK/openapi-gen" -i "$INPUTS" -p k8s.io/kubernetes/pkg/generated/openapi \
  -O zz_generated.openapi -h vendor/k8s.io/code-generator/hack/boilerplate.go.txt >&2

# Both version packages, as upstream's hack/lib/version.sh does: --version reads one, the
# /version endpoint (and kubectl's skew check) the other. The vendor prefix is GOPATH mode's.
LDFLAGS="-s -w"
for V in k8s.io/kubernetes/vendor/k8s.io/component-base/version k8s.io/kubernetes/vendor/k8s.io/client-go/pkg/version; do
  LDFLAGS="$LDFLAGS -X $V.gitVersion=$K8S_VERSION -X $V.gitMajor=1 -X $V.gitMinor=20"
done
mkdir -p "$CACHE.partial"
log "building kube-apiserver (a few minutes on 2 cores)"
go build -ldflags "$LDFLAGS" -o "$CACHE.partial/kube-apiserver" ./cmd/kube-apiserver
if ! command -v kubectl >/dev/null; then
  # These machines ship kubectl; elsewhere build the matching one rather than fetch it.
  log "no kubectl on PATH: building kubectl $K8S_VERSION"
  go build -ldflags "$LDFLAGS" -o "$CACHE.partial/kubectl" ./cmd/kubectl
fi
cp "$(command -v etcd)" "$CACHE.partial/etcd"
rm -rf "$CACHE"
mv "$CACHE.partial" "$CACHE"
"$CACHE/kube-apiserver" --version >&2
echo "$CACHE"
