#!/usr/bin/env bash
# Make sure a Docker engine answers: the real-cluster tier builds the project image with it.
#
#   hack/dockerd.sh          starts dockerd (Debian's docker.io) when none answers; prints its pid,
#                            or nothing when one was already running
#   hack/dockerd.sh stop PID stops the one it started
#
# On a laptop Docker Desktop or the distribution's service is already up and this does nothing.
set -euo pipefail
log() { echo "dockerd: $*" >&2; }
if [[ "${1:-}" == stop ]]; then
  [[ -n "${2:-}" ]] && kill "$2" 2>/dev/null && log "stopped $2"
  exit 0
fi
if docker info >/dev/null 2>&1; then exit 0; fi
command -v dockerd >/dev/null || { log "no dockerd (apt-get install docker.io)"; exit 2; }
logfile="${XDG_CACHE_HOME:-$HOME/.cache}/flux-gate-admission/dockerd.log"
mkdir -p "$(dirname "$logfile")"
dockerd >"$logfile" 2>&1 &
pid=$!
for _ in $(seq 1 120); do
  if docker info >/dev/null 2>&1; then log "started (pid $pid, log $logfile)"; echo "$pid"; exit 0; fi
  kill -0 "$pid" 2>/dev/null || { tail -20 "$logfile" >&2; exit 1; }
  sleep 0.5
done
log "did not answer within 60 s"; tail -20 "$logfile" >&2; kill "$pid"; exit 1
