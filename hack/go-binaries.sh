#!/usr/bin/env bash
# Build the real Kubernetes and Flux binaries the end-to-end tests run, once, from their Go
# modules through the go command's configured proxy, and cache them keyed by version.
#
#   hack/go-binaries.sh control-plane   kube-apiserver, kubectl (same version), etcd
#   hack/go-binaries.sh flux            the Flux controllers, the flux CLI, their CRDs (crds/)
#   hack/go-binaries.sh tools           an OCI registry for the real-Flux tests
#   hack/go-binaries.sh promtool        Prometheus's promtool: the alert rules' unit tests, the dashboard's queries
#   hack/go-binaries.sh node            kubelet, kube-proxy, kube-controller-manager, kube-scheduler, pause
#   hack/go-binaries.sh helm            the helm CLI, for the chart's tests (charts/gate-admission)
#   hack/go-binaries.sh all             all of the above
#
# Each prints the directory that holds its binaries on stdout (one line per argument); progress,
# one line per binary with its build time, goes to stderr. Nothing is rebuilt once cached.
set -euo pipefail

# Every version can be set from the environment (hack/matrix.sh builds each cell that way); the
# defaults are the cell the README's test command runs. Every cache directory is keyed by all
# the versions in it, so cells never share one.
K8S_VERSION=${K8S_VERSION:-v1.36.3}   # current Kubernetes; Flux v2.9 requires >= 1.33
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
# The flux CLI's version; its release's manifests (manifests/bases/*/kustomization.yaml in the
# flux2 module) name the controller versions, unless FLUX_CONTROLLERS names some:
# "kustomize-controller=v1.10.1,helm-controller=v1.7.x" (vX.Y.x: the newest served patch).
# A release that needs a newer Go builds with GOTOOLCHAIN set (the go command fetches it).
FLUX_VERSION=${FLUX_VERSION:-v2.9.4}
FLUX_CONTROLLERS=${FLUX_CONTROLLERS:-}
FLUX_CONTROLLER_NAMES=(source-controller kustomize-controller helm-controller notification-controller
  image-reflector-controller image-automation-controller)
GGCR_VERSION=v0.21.9  # go-containerregistry, for its in-memory OCI registry
HELM_VERSION=v4.3.1   # the helm CLI (helm.sh/helm/v4)
PROMETHEUS_VERSION=v0.316.0  # github.com/prometheus/prometheus (Prometheus 3.x's Go module), for promtool

ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/flux-gate-admission"
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false
log() { echo "go-binaries: $*" >&2; }
command -v go >/dev/null || { log "the go command is needed (Go >= 1.26)"; exit 2; }

WORK=$(mktemp -d)
trap 'chmod -R u+w "$WORK" 2>/dev/null; rm -rf "$WORK"' EXIT

# timed NAME CMD...: run a build step with a progress line and its duration.
timed() {
  local name=$1 started; shift
  started=$(date +%s)
  log "building $name ..."
  "$@" >&2
  log "built $name in $(( $(date +%s) - started ))s"
}

HACK="$(cd "$(dirname "$0")" && pwd)"

# In the current module: fetch every dependency; one the configured proxy does not serve is
# replaced by the nearest older patch release it does serve (logged).
fetch_dependencies() {
  local replacement
  for replacement in $(go mod download -json 2>/dev/null | python3 "$HACK/nearest-served.py"); do
    go mod edit -replace="$replacement"
    go mod download "${replacement%%=*}"  # records the stand-in's checksum in go.sum
  done
  # A module with no served release near it may be needed by the module's tests alone
  # (source-controller v1.9.5's helmtestserver): the build fetches what it compiles, and fails
  # naming the module if that is one.
  go mod download || log "a module above is not served; building with what is"
}

# In the current module: a `replace` pointing at a fork the proxy does not serve is dropped, and
# the upstream release the fork is based on is required instead (logged).
# Sets FORKS_REPLACED when it changed something: the upstream release has dependencies of its
# own, which `go mod tidy` then records (with their checksums).
upstream_for_unserved_forks() {
  local upstream found
  FORKS_REPLACED=""
  # Captured first: inside the for list, the script's failure ("neither is served") would be
  # lost, and the build would fail later on a confusing go error.
  found=$(go mod edit -json | python3 "$HACK/nearest-served.py" --forks) || return 1
  for upstream in $found; do
    go mod edit -dropreplace="${upstream%@*}" -require="$upstream"
    FORKS_REPLACED=1
  done
}

module_dir() {  # the module's extracted source directory in the module cache
  go mod download -json "$1@$2" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])'
}

# A writable copy of a module's source, so its go.mod can be edited.
module_copy() {
  local dest="$WORK/src/$(basename "$1")-$2"
  rm -rf "$dest"; mkdir -p "$(dirname "$dest")"
  cp -r "$(module_dir "$1" "$2")" "$dest"
  chmod -R u+w "$dest"
  echo "$dest"
}

# In a fresh module under $WORK/kube: k8s.io/kubernetes at $K8S_VERSION with its staging modules
# at their published versions, the given commands required. Sets KUBE_LDFLAGS (version stamps).
kube_module() {
  local src="$WORK/kube" minor=${K8S_VERSION#v1.} cmd; minor=${minor%%.*}
  rm -rf "$src"; mkdir -p "$src"; cd "$src"
  go mod init fga.local/kube >&2
  go mod edit -require="k8s.io/kubernetes@$K8S_VERSION"
  # k8s.io/kubernetes requires its staging modules at v0.0.0 (replaced by ./staging in its own
  # repository): point each at the published version of this release.
  local gomod; gomod="$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')"
  local staging
  for staging in $(awk '$1 ~ /^k8s\.io\// && $2 == "v0.0.0" {print $1}' "$gomod" | sort -u); do
    go mod edit -replace="$staging=$staging@v0.$minor.${K8S_VERSION##*.}"
  done
  local pkgs=()
  for cmd in "$@"; do pkgs+=("k8s.io/kubernetes/cmd/$cmd@$K8S_VERSION"); done
  go get "${pkgs[@]}" >&2
  # Without the version stamps /version says v0.0.0, kubectl warns about skew, Helm's
  # kubeVersion checks fail and the kubelet reports a node version the API server rejects.
  KUBE_LDFLAGS="-s -w"
  local pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    KUBE_LDFLAGS="$KUBE_LDFLAGS -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  done
}

build_control_plane() {
  local out="$ROOT/control-plane/$K8S_VERSION-etcd$ETCD_VERSION"
  if [[ -x "$out/kube-apiserver" && -x "$out/kubectl" && -x "$out/etcd" ]]; then echo "$out"; return; fi
  mkdir -p "$out.partial"
  kube_module kube-apiserver kubectl
  timed "kube-apiserver $K8S_VERSION" go build -trimpath -ldflags "$KUBE_LDFLAGS" -o "$out.partial/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
  timed "kubectl $K8S_VERSION" go build -trimpath -ldflags "$KUBE_LDFLAGS" -o "$out.partial/kubectl" k8s.io/kubernetes/cmd/kubectl

  local src
  src="$WORK/etcd"; mkdir -p "$src"; cd "$src"
  go mod init fga.local/etcd >&2
  cat > main.go <<'GO'
// etcd's own main, as its server module exposes it.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >&2
  go mod tidy >&2
  timed "etcd $ETCD_VERSION" go build -trimpath -ldflags "-s -w" -o "$out.partial/etcd" .
  rm -rf "$out"; mv "$out.partial" "$out"
  "$out/kube-apiserver" --version >&2
  echo "$out"
}

# Sets FLUX_MODULES ("name module version" per controller) and FLUX_KEY (the cache key: the
# CLI's version, then each controller whose version is not its release's own). A version the
# proxy does not serve is replaced by the nearest older patch of its minor (logged); when none
# is, the build stops naming every version missing.
resolve_flux() {
  local manifests="" name wanted ver released missing=()
  FLUX_MODULES=()
  if ver=$(python3 "$HACK/nearest-served.py" --release github.com/fluxcd/flux2/v2 "$FLUX_VERSION"); then
    FLUX_VERSION=$ver
    manifests="$(module_dir github.com/fluxcd/flux2/v2 "$FLUX_VERSION")/manifests/bases"
  else
    missing+=("the flux CLI $FLUX_VERSION (github.com/fluxcd/flux2/v2)")
  fi
  FLUX_KEY=$FLUX_VERSION
  for name in "${FLUX_CONTROLLER_NAMES[@]}"; do
    released=""
    [[ -z "$manifests" ]] || released=$(grep -o 'releases/download/v[0-9.]*/' "$manifests/$name/kustomization.yaml" | head -1 | cut -d/ -f3)
    wanted=$released
    for ver in ${FLUX_CONTROLLERS//,/ }; do [[ ${ver%%=*} == "$name" ]] && wanted=${ver#*=}; done
    [[ -n "$wanted" ]] || { missing+=("$name (its release's manifests are not served; name it in FLUX_CONTROLLERS)"); continue; }
    if ver=$(python3 "$HACK/nearest-served.py" --release "github.com/fluxcd/$name" "$wanted"); then
      FLUX_MODULES+=("$name github.com/fluxcd/$name $ver")
      [[ "$ver" == "$released" ]] || FLUX_KEY+="+$name-$ver"
    else
      missing+=("$name $wanted")
    fi
  done
  if (( ${#missing[@]} )); then
    log "cannot build (not served by the Go module proxy, or needing a newer Go): $(printf '%s; ' "${missing[@]}" | sed 's/; $//')"
    exit 1
  fi
}

# Each controller is built once per version (flux-parts/) and copied into every cell that has it.
build_flux() {
  local out line name mod ver src part
  resolve_flux
  out="$ROOT/flux/$FLUX_KEY"
  # What the cell holds, one "name version" a line (hack/matrix.sh publishes it).
  if [[ ! -f "$out/versions" ]]; then
    mkdir -p "$out"
    { printf '%s\n' "${FLUX_MODULES[@]}" | awk '{print $1, $3}'; echo "flux $FLUX_VERSION"; } > "$out/versions"
  fi
  if [[ -f "$out/.complete" ]]; then echo "$out"; return; fi
  mkdir -p "$out/crds"
  for line in "${FLUX_MODULES[@]}"; do
    read -r name mod ver <<<"$line"
    part="$ROOT/flux-parts/$name-$ver"
    if [[ ! -x "$out/$name" && ! -x "$part/$name" ]]; then
      mkdir -p "$part"
      src=$(module_copy "$mod" "$ver"); cd "$src"
      # Each controller replaces its ./api with the local directory, which `go install` refuses:
      # take the published api module of the same version instead.
      go mod edit -dropreplace="$mod/api"
      upstream_for_unserved_forks || exit 1
      go get "$mod/api@$ver" >&2
      [[ -z "$FORKS_REPLACED" ]] || go mod tidy -e >&2
      fetch_dependencies
      timed "$name $ver" go build -trimpath -ldflags "-s -w" -o "$part/$name.partial" .
      mv "$part/$name.partial" "$part/$name"
    fi
    [[ -x "$out/$name" ]] || cp "$part/$name" "$out/$name"
    cp "$(module_dir "$mod" "$ver")"/config/crd/bases/*.yaml "$out/crds/"
  done
  part="$ROOT/flux-parts/flux-$FLUX_VERSION"
  if [[ ! -x "$out/flux" && ! -x "$part/flux" ]]; then
    mkdir -p "$part"
    src=$(module_copy github.com/fluxcd/flux2/v2 "$FLUX_VERSION"); cd "$src"
    # The CLI embeds the install manifests, which the module zip lacks; `flux install` cannot
    # work without them, but get/reconcile/check --pre and plugins do.
    mkdir -p cmd/flux/manifests && echo "# placeholder" > cmd/flux/manifests/placeholder.yaml
    fetch_dependencies
    timed "flux CLI $FLUX_VERSION" go build -trimpath \
      -ldflags "-s -w -X main.VERSION=${FLUX_VERSION#v}" -o "$part/flux.partial" ./cmd/flux
    mv "$part/flux.partial" "$part/flux"
  fi
  [[ -x "$out/flux" ]] || cp "$part/flux" "$out/flux"
  chmod -R a-w "$out/crds"; chmod u+w "$out/crds"
  touch "$out/.complete"
  echo "$out"
}

build_tools() {
  local out="$ROOT/tools/ggcr-$GGCR_VERSION"
  if [[ -x "$out/registry" ]]; then echo "$out"; return; fi
  local src="$WORK/registry"; mkdir -p "$src" "$out"; cd "$src"
  go mod init fga.local/registry >&2
  cat > main.go <<'GO'
// An in-memory OCI distribution registry on a loopback address, for tests: go-containerregistry's.
package main

import (
	"flag"
	"log"
	"net"
	"net/http"
	"os"

	"github.com/google/go-containerregistry/pkg/registry"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	flag.Parse()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	// The test harness reads the address it got from the first line.
	os.Stdout.WriteString(ln.Addr().String() + "\n")
	log.Fatal(http.Serve(ln, registry.New(registry.Logger(log.New(os.Stderr, "", log.LstdFlags)))))
}
GO
  go get "github.com/google/go-containerregistry@$GGCR_VERSION" >&2
  go mod tidy >&2
  timed "OCI registry (go-containerregistry $GGCR_VERSION)" go build -trimpath -ldflags "-s -w" -o "$out/registry.partial" .
  mv "$out/registry.partial" "$out/registry"
  echo "$out"
}

# The helm CLI, built in its own module (so `helm version` can read the client-go it was built
# with from the build info, as Helm's own builds do).
build_helm() {
  local out="$ROOT/helm/$HELM_VERSION" src
  if [[ -x "$out/helm" ]]; then echo "$out"; return; fi
  mkdir -p "$out"
  src=$(module_copy helm.sh/helm/v4 "$HELM_VERSION"); cd "$src"
  fetch_dependencies
  # Helm's Makefile stamps these; without them `helm version` says v4.3 with "unreleased".
  local pkg=helm.sh/helm/v4/internal/version
  timed "helm $HELM_VERSION" go build -trimpath \
    -ldflags "-s -w -X $pkg.version=$HELM_VERSION -X $pkg.metadata= -X $pkg.gitTreeState=clean" \
    -o "$out/helm.partial" ./cmd/helm
  mv "$out/helm.partial" "$out/helm"
  "$out/helm" version >&2
  echo "$out"
}

# Prometheus's promtool, built in Prometheus's own module (its go.mod's versions, as its releases
# are built): `promtool test rules` evaluates our alert rules and the dashboard's queries.
build_promtool() {
  local out="$ROOT/tools/prometheus-$PROMETHEUS_VERSION-nosd" src
  if [[ -x "$out/promtool" ]]; then echo "$out"; return; fi
  mkdir -p "$out"
  src=$(module_copy github.com/prometheus/prometheus "$PROMETHEUS_VERSION"); cd "$src"
  # Its go.work names modules the module zip leaves out.
  export GOWORK=off
  fetch_dependencies
  # v0.316.0 is Prometheus 3.16.0: the version promtool --version says, as its releases stamp it.
  local pkg=github.com/prometheus/common/version minor=${PROMETHEUS_VERSION#v0.3}
  # Without the service discoveries (remove_all_sd: their cloud SDKs are most of the build, and
  # rules and queries need none of them).
  timed "promtool $PROMETHEUS_VERSION" go build -trimpath -tags remove_all_sd \
    -ldflags "-s -w -X $pkg.Version=3.${minor%%.*}.${PROMETHEUS_VERSION##*.} -X $pkg.Branch=release" \
    -o "$out/promtool.partial" ./cmd/promtool
  mv "$out/promtool.partial" "$out/promtool"
  "$out/promtool" --version >&2
  echo "$out"
}

# A node's and a cluster's other parts, for the real-cluster tier (tests/cluster): the kubelet,
# kube-proxy, kube-controller-manager and kube-scheduler of the same Kubernetes, and a pause
# binary (the Pod sandbox's process: it holds the namespaces and exits on SIGTERM/SIGINT).
NODE_COMMANDS=(kubelet kube-proxy kube-controller-manager kube-scheduler)
build_node() {
  local out="$ROOT/node/$K8S_VERSION" cmd
  if [[ -f "$out/.complete" ]]; then echo "$out"; return; fi
  mkdir -p "$out"
  kube_module "${NODE_COMMANDS[@]}"
  for cmd in "${NODE_COMMANDS[@]}"; do
    [[ -x "$out/$cmd" ]] && continue
    timed "$cmd $K8S_VERSION" go build -trimpath -ldflags "$KUBE_LDFLAGS" -o "$out/$cmd.partial" "k8s.io/kubernetes/cmd/$cmd"
    mv "$out/$cmd.partial" "$out/$cmd"
  done
  local src="$WORK/pause"; mkdir -p "$src"; cd "$src"
  go mod init fga.local/pause >&2
  cat > main.go <<'GO'
// A Pod sandbox's process: holds the Pod's namespaces until told to stop, reaping orphans.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			if pid, _ := syscall.Wait4(-1, &status, syscall.WNOHANG, nil); pid <= 0 {
				break
			}
		}
	}
}
GO
  timed "pause" go build -trimpath -ldflags "-s -w" -o "$out/pause" .
  touch "$out/.complete"
  echo "$out"
}

[[ $# -gt 0 ]] || set -- all
for what in "$@"; do
  case "$what" in
    control-plane) build_control_plane ;;
    flux) build_flux ;;
    tools) build_tools ;;
    node) build_node ;;
    helm) build_helm ;;
    promtool) build_promtool ;;
    all) build_control_plane; build_flux; build_tools; build_node; build_helm; build_promtool ;;
    *) log "unknown: $what (control-plane|flux|tools|node|helm|promtool|all)"; exit 2 ;;
  esac
done
