#!/usr/bin/env bash
# Install everything the tests need on a fresh machine, then run them all.
#   - the real Kubernetes (kube-apiserver, etcd, kubectl) and the real Flux (controllers, CLI,
#     CRDs) for the end-to-end tiers, built once from their Go modules and cached in
#     ~/.cache/flux-gate-admission (hack/go-binaries.sh; $KUBEBUILDER_ASSETS wins for the
#     control plane)
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
if (( ${#missing[@]} )); then
  SUDO=""; [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
KUBEBUILDER_ASSETS="$(hack/control-plane-binaries.sh)"
FLUX_BINARIES="$(hack/go-binaries.sh flux)"
TEST_TOOLS="$(hack/go-binaries.sh tools)"
export KUBEBUILDER_ASSETS FLUX_BINARIES TEST_TOOLS
echo "control plane: $KUBEBUILDER_ASSETS; Flux: $FLUX_BINARIES; tools: $TEST_TOOLS ($(( $(date +%s) - started ))s)"
[[ -x .venv/bin/python ]] || python3 -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check -e '.[test]'
exec .venv/bin/python -m pytest "$@"
