#!/usr/bin/env bash
# Install everything the tests need on a fresh machine, then run them all.
#   - the real Kubernetes (kube-apiserver, etcd, kubectl) and the real Flux (controllers, CLI,
#     CRDs) for the end-to-end tiers, and the helm CLI for the chart's tests (tests/chart),
#     built once from their Go modules and cached in ~/.cache/flux-gate-admission
#     (hack/go-binaries.sh; $KUBEBUILDER_ASSETS wins for the control plane)
#   - for the real-cluster tier (tests/cluster): a Docker engine (started here when none runs,
#     stopped at the end), the project image built from the Dockerfile (hack/image.sh), and a
#     node's parts (kubelet, kube-proxy, controller-manager, scheduler; hack/go-binaries.sh node)
#     with Debian's containerd, runc, CNI plugins and iptables
#   - .venv with the project and its test extras
# Arguments go to pytest, e.g. hack/test.sh tests/unit -x
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
# Debian packages the tests use: openssl (TLS version checks), faketime (a clock that jumps),
# zsh and bash-completion (shell completion of kubectl gate, run in the real shells).
missing=()
command -v openssl >/dev/null || missing+=(openssl)
command -v zsh >/dev/null || missing+=(zsh)
[[ -e /usr/share/bash-completion/bash_completion ]] || missing+=(bash-completion)
[[ -e /usr/lib/$(uname -m)-linux-gnu/faketime/libfaketimeMT.so.1 ]] || missing+=(faketime)
# The real-cluster tier's node and image (tests/cluster/node.py, hack/image.sh).
# command:Debian package
for pair in dockerd:docker.io `# the Docker engine's package` debootstrap:debootstrap containerd:containerd runc:runc iptables:iptables \
            conntrack:conntrack ip:iproute2; do
  command -v "${pair%%:*}" >/dev/null || [[ -x "/usr/sbin/${pair%%:*}" ]] || missing+=("${pair#*:}")
done
[[ -x /usr/lib/cni/bridge ]] || missing+=(containernetworking-plugins)
if (( ${#missing[@]} )); then
  SUDO=""; [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
KUBEBUILDER_ASSETS="$(hack/control-plane-binaries.sh)"
FLUX_BINARIES="$(hack/go-binaries.sh flux)"
TEST_TOOLS="$(hack/go-binaries.sh tools)"
FGA_NODE_BINARIES="$(hack/go-binaries.sh node)"
HELM_BINARIES="$(hack/go-binaries.sh helm)"
export KUBEBUILDER_ASSETS FLUX_BINARIES TEST_TOOLS FGA_NODE_BINARIES HELM_BINARIES
echo "control plane: $KUBEBUILDER_ASSETS; Flux: $FLUX_BINARIES; tools: $TEST_TOOLS; node: $FGA_NODE_BINARIES; helm: $HELM_BINARIES ($(( $(date +%s) - started ))s)"
# The real-cluster tier needs root (the kubelet) and a Docker engine; as root with Docker up, a
# missing part fails it rather than skipping it.
dockerd_pid=""
if [[ $(id -u) -eq 0 ]]; then
  dockerd_pid="$(hack/dockerd.sh)"
  trap 'hack/dockerd.sh stop "$dockerd_pid"' EXIT
  GATE_IMAGE="$(hack/image.sh)"
  export GATE_IMAGE FGA_CLUSTER=required
  echo "image: $GATE_IMAGE ($(( $(date +%s) - started ))s)"
fi
[[ -x .venv/bin/python ]] || python3 -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check -e '.[test]'
# Run in full (no test named: every argument an option), the real-cluster tier runs in a pytest
# of its own beside the other tiers: it mostly waits on Kubernetes (half a core on average), its
# node and ports are its own, and a warm CI run then takes the longer of the two instead of both.
# Its report follows the others'; either failing fails the run.
whole=1
for arg in "$@"; do [[ $arg == -* ]] || whole=0; done
if [[ ${FGA_CLUSTER:-} == required && $whole == 1 ]]; then
  cluster_log="$(mktemp)" cluster_tmp="$(mktemp -d)"
  .venv/bin/python -m pytest "$@" -p no:cacheprovider --basetemp "$cluster_tmp" tests/cluster >"$cluster_log" 2>&1 &
  cluster_pid=$!
  rc=0 cluster_rc=0
  .venv/bin/python -m pytest "$@" --ignore tests/cluster || rc=$?
  wait "$cluster_pid" || cluster_rc=$?
  echo "======== tests/cluster, run beside the other tiers (pytest exit $cluster_rc) ========"
  cat "$cluster_log"
  rm -rf "$cluster_log" "$cluster_tmp"
  echo "hack/test.sh: $(( $(date +%s) - started ))s in all"
  (( rc == 0 )) && exit "$cluster_rc"
  exit "$rc"
fi
.venv/bin/python -m pytest "$@"
