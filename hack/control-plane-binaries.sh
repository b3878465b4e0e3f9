#!/usr/bin/env bash
# Print a directory holding kube-apiserver and etcd (and a kubectl of the same version):
# $KUBEBUILDER_ASSETS when it holds both (the envtest convention), else the current Kubernetes
# built once from its Go modules and cached (hack/go-binaries.sh control-plane).
set -euo pipefail
if [[ -n "${KUBEBUILDER_ASSETS:-}" && -x "$KUBEBUILDER_ASSETS/kube-apiserver" && -x "$KUBEBUILDER_ASSETS/etcd" ]]; then
  echo "$KUBEBUILDER_ASSETS"; exit 0
fi
exec "$(dirname "$0")/go-binaries.sh" control-plane
