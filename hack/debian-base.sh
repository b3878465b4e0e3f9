#!/usr/bin/env bash
# Make the Dockerfile's base image from Debian packages, for machines where no image registry
# answers (so `FROM python:3.13-slim-trixie` cannot be pulled): debootstrap through the
# machine's configured apt sources, then `docker import`. Cached as a docker image and as a
# tarball in ~/.cache/flux-gate-admission/images, keyed by its inputs.
#
#   hack/debian-base.sh            prints the image name (fga-base:trixie-<key>)
#
# The machine's extra CA certificates (/usr/local/share/ca-certificates) are copied in, so that
# pip inside a build verifies TLS the way the host does behind a mirror. Users with a registry
# never need this: they keep the Dockerfile's default base.
set -euo pipefail
SUITE=trixie  # the suite the Dockerfile's default base is made from: keep them in step
PACKAGES=python3,python3-pip,python3-venv,python-is-python3,ca-certificates
log() { echo "debian-base: $*" >&2; }
command -v debootstrap >/dev/null || { log "needs debootstrap (apt-get install debootstrap)"; exit 2; }
key=$( { echo "$SUITE $PACKAGES v2"; cat /usr/local/share/ca-certificates/*.crt 2>/dev/null || true; } | sha256sum | cut -c1-12)
name="fga-base:$SUITE-$key"
if docker image inspect "$name" >/dev/null 2>&1; then echo "$name"; exit 0; fi
cache="${XDG_CACHE_HOME:-$HOME/.cache}/flux-gate-admission/images"
tarball="$cache/base-$SUITE-$key.tar"
if [[ ! -s "$tarball" ]]; then
  # The machine's Debian archive (not its security archive), whichever suite the machine runs:
  # one mirror serves every suite.
  mirror=$(awk '$1 == "deb" && $2 !~ /^\[/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true)
  if [[ -z "$mirror" ]]; then  # deb822 sources (bookworm's and trixie's default format)
    mirror=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  fi
  [[ -n "$mirror" ]] || { log "no Debian mirror in the apt sources"; exit 2; }
  root=$(mktemp -d); trap 'rm -rf "$root" "$root.log"' EXIT
  started=$(date +%s)
  log "debootstrap $SUITE ($PACKAGES) ..."
  debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$root" "$mirror" >"$root.log" 2>&1 \
    || { tail -20 "$root.log" >&2; exit 1; }
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
    chroot "$root" update-ca-certificates >&2
  fi
  # The apt lists and caches, documentation and message translations (33 MB: the server speaks
  # English and reads no locale) only make the image larger.
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/usr/share/doc/* "$root"/usr/share/man/* \
    "$root"/usr/share/locale/* "$root"/usr/share/info/*
  mkdir -p "$cache"
  tar -C "$root" -c . > "$tarball.partial" && mv "$tarball.partial" "$tarball"
  log "made the base in $(( $(date +%s) - started ))s"
fi
docker import "$tarball" "$name" >&2
echo "$name"
