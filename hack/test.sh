#!/usr/bin/env bash
# Install what the tests asked for need, then run them. Arguments go to pytest.
#   hack/test.sh                  every tier: what CI runs (.ci/run)
#   hack/test.sh tests/unit -x    the fast loop: tests/unit, tests/app, tests/kube, tests/ical and
#                                 tests/server need only .venv, so naming only those builds
#                                 nothing, starts nothing and asks no network once .venv exists
# What each tier needs, installed only for the tiers named (all when none is):
#   - the real Kubernetes (kube-apiserver, etcd, kubectl) and the real Flux (controllers, CLI,
#     CRDs) for the end-to-end tiers, the helm CLI for the chart's tests (tests/chart) and
#     Prometheus's promtool for the alerts' and the dashboard's (tests/monitoring, tests/cluster),
#     built once from their Go modules and cached in ~/.cache/flux-gate-admission
#     (hack/go-binaries.sh; $KUBEBUILDER_ASSETS wins for the control plane)
#   - for the real-cluster tier (tests/cluster): a Docker engine (started here when none runs,
#     stopped at the end), the project image built from the Dockerfile (hack/image.sh), and a
#     node's parts (kubelet, kube-proxy, controller-manager, scheduler; hack/go-binaries.sh node)
#     with Debian's containerd, runc, CNI plugins and iptables
#   - for the real-Flux tier: Debian's chromium and chromium-driver (the gate board in a real
#     browser, tests/realflux/test_board.py)
#   - .venv with the project and its test extras (made, or brought up to date when
#     pyproject.toml changed)
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)

# The tiers the arguments name: a path under tests/ names its tier (tests/unit/test_x.py::t is
# tests/unit); no path, or tests/ itself, names them all. Anything else (an option, or an
# option's value such as -k's) names none.
tiers=" " whole=1
for arg in "$@"; do
  [[ $arg == -* ]] && continue
  path=${arg%%::*} path=${path#./} path=${path%/}
  [[ -e $path ]] || continue
  whole=0
  case $path in
    tests/*/*|tests/*) tier=${path#tests/} tier=${tier%%/*}; tiers+="$tier " ;;
    *) tiers=" all "; break ;;
  esac
done
(( whole )) && tiers=" all "
# wants TIER...: whether any of these tiers runs.
wants() {
  local tier
  [[ $tiers == *" all "* || $tiers == *" tests "* ]] && return 0
  for tier in "$@"; do [[ $tiers == *" $tier "* ]] && return 0; done
  return 1
}

# Debian packages the tests use: openssl (TLS version checks), faketime (a clock that jumps),
# zsh, fish and bash-completion (shell completion of kubectl gate, run in the real shells), pipx
# (the README's line that installs the commands), and for the tiers named below, theirs.
missing=()
command -v openssl >/dev/null || missing+=(openssl)
command -v zsh >/dev/null || missing+=(zsh)
command -v fish >/dev/null || missing+=(fish)
command -v pipx >/dev/null || missing+=(pipx)
[[ -e /usr/share/bash-completion/bash_completion ]] || missing+=(bash-completion)
[[ -e /usr/lib/$(uname -m)-linux-gnu/faketime/libfaketimeMT.so.1 ]] || missing+=(faketime)
if wants realflux; then
  # The gate board's real-browser tests (tests/realflux/test_board.py): Debian's browser and its driver.
  command -v chromium >/dev/null || missing+=(chromium)
  command -v chromedriver >/dev/null || missing+=(chromium-driver)
fi
if wants cluster; then
  # The real-cluster tier's node and image (tests/cluster/node.py, hack/image.sh).
  # command:Debian package
  for pair in dockerd:docker.io `# the Docker engine's package` debootstrap:debootstrap containerd:containerd runc:runc iptables:iptables \
              conntrack:conntrack ip:iproute2; do
    command -v "${pair%%:*}" >/dev/null || [[ -x "/usr/sbin/${pair%%:*}" ]] || missing+=("${pair#*:}")
  done
  [[ -x /usr/lib/cni/bridge ]] || missing+=(containernetworking-plugins)
fi
if (( ${#missing[@]} )); then
  SUDO=""; [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The Go-built binaries, each only for the tiers that run it (tests/README.md, "Running").
built=()
if wants e2e realflux chart cluster; then
  KUBEBUILDER_ASSETS="$(hack/control-plane-binaries.sh)"; export KUBEBUILDER_ASSETS; built+=("control plane: $KUBEBUILDER_ASSETS")
fi
if wants e2e realflux cluster; then
  FLUX_BINARIES="$(hack/go-binaries.sh flux)"; export FLUX_BINARIES; built+=("Flux: $FLUX_BINARIES")
fi
# TEST_TOOLS lists directories, as PATH does: the OCI registry's, promtool's.
if wants realflux cluster; then
  TEST_TOOLS="$(hack/go-binaries.sh tools)"; export TEST_TOOLS; built+=("tools: $TEST_TOOLS")
fi
if wants monitoring cluster; then
  promtool_dir="$(hack/go-binaries.sh promtool)"; built+=("promtool: $promtool_dir")
  TEST_TOOLS="${TEST_TOOLS:+$TEST_TOOLS:}$promtool_dir"; export TEST_TOOLS
fi
if wants cluster; then
  FGA_NODE_BINARIES="$(hack/go-binaries.sh node)"; export FGA_NODE_BINARIES; built+=("node: $FGA_NODE_BINARIES")
fi
if wants chart cluster; then
  HELM_BINARIES="$(hack/go-binaries.sh helm)"; export HELM_BINARIES; built+=("helm: $HELM_BINARIES")
fi
(( ${#built[@]} )) && echo "$(IFS=';'; echo "${built[*]}") ($(( $(date +%s) - started ))s)"

# The real-cluster tier needs root (the kubelet) and a Docker engine; as root with Docker up, a
# missing part fails it rather than skipping it.
dockerd_pid=""
if wants cluster && [[ $(id -u) -eq 0 ]]; then
  dockerd_pid="$(hack/dockerd.sh)"
  trap 'hack/dockerd.sh stop "$dockerd_pid"' EXIT
  GATE_IMAGE="$(hack/image.sh)"
  export GATE_IMAGE FGA_CLUSTER=required
  echo "image: $GATE_IMAGE ($(( $(date +%s) - started ))s)"
fi

# .venv: installed when made, and again only when pyproject.toml changed since (an editable
# install builds in an isolated environment, which asks the package index).
[[ -x .venv/bin/python ]] || python3 -m venv .venv
if [[ ! -e .venv/.installed || pyproject.toml -nt .venv/.installed ]]; then
  .venv/bin/pip install -q --disable-pip-version-check -e '.[test]'
  touch .venv/.installed
fi

# Run in full (no test named), the real-cluster tier runs in a pytest of its own beside the
# other tiers: it mostly waits on Kubernetes (half a core on average), its node and ports are
# its own, and a warm CI run then takes the longer of the two instead of both. Its report
# follows the others'; either failing fails the run.
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
