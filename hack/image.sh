#!/usr/bin/env bash
# Build the project image with docker from the Dockerfile, as a user would:
#
#   hack/image.sh [TAG]      builds gate-admission:TAG (default: the manifests' tag), prints its name
#
# The base is the Dockerfile's default (python:3.13-slim-trixie) when it can be pulled; where no
# image registry answers, one made from Debian packages (hack/debian-base.sh). $BASE_IMAGE wins.
# Progress and the image's size go to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
tag=${1:-$(awk '$1 == "newTag:" {print $2; exit}' manifests/kustomization.yaml)}
image="gate-admission:$tag"
log() { echo "image: $*" >&2; }
default_base=$(awk -F= '/^ARG BASE_IMAGE=/ {print $2; exit}' Dockerfile)
base=${BASE_IMAGE:-}
if [[ -z "$base" ]]; then
  if docker image inspect "$default_base" >/dev/null 2>&1 || docker pull -q "$default_base" >/dev/null 2>&1; then
    base=$default_base
  else
    log "$default_base cannot be pulled here: making a base from Debian packages"
    base=$(hack/debian-base.sh)
  fi
fi
started=$(date +%s)
log "building $image on $base ..."
docker build -q --build-arg "BASE_IMAGE=$base" -t "$image" . >&2
size=$(docker image inspect -f '{{.Size}}' "$image")
log "built $image in $(( $(date +%s) - started ))s: $(( size / 1000000 )) MB"
echo "$image"
