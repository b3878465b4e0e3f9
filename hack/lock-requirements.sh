#!/usr/bin/env bash
# Regenerate requirements.lock: exact pins, with every file's sha256, of the runtime
# dependencies in pyproject.toml (not the test extras). The Dockerfile installs it with
# `pip --require-hashes --only-binary=:all:`, so the image build never resolves, never
# compiles, and gets the same bytes every time.
#
# Resolved for the image's interpreter (CPython 3.13, glibc 2.41: Debian trixie) once for
# x86_64 and once for aarch64, wheels only; the two must come out identical, so one lock
# serves both architectures. Current pins are kept unless asked otherwise:
#   hack/lock-requirements.sh                      # after editing pyproject.toml dependencies
#   hack/lock-requirements.sh --upgrade            # newest versions within the ranges
#   hack/lock-requirements.sh --upgrade-package flask
# uv runs from a throwaway virtualenv (pinned version); nothing else on the machine changes.
set -euo pipefail
cd "$(dirname "$0")/.."

UV_VERSION=0.13.8
PYTHON_VERSION=3.13   # keep in step with the Dockerfile's base image
GLIBC=2_40            # the newest this uv names; Debian trixie's (the base image's) is 2.41

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
python3 -m venv "$WORK/venv"
"$WORK/venv/bin/pip" install -q --disable-pip-version-check "uv==$UV_VERSION"

# The package index is this machine's, as pip is configured (pip.conf, PIP_INDEX_URL, ...): no
# address is written here. uv does not read pip's configuration, so pip's index, when one is
# set, is handed to uv; without one, uv's own configuration or default applies.
PIP_INDEX=$("$WORK/venv/bin/pip" config get global.index-url 2>/dev/null || true)
PIP_INDEX=${PIP_INDEX_URL:-$PIP_INDEX}
PIP_EXTRA=$("$WORK/venv/bin/pip" config get global.extra-index-url 2>/dev/null || true)
PIP_EXTRA=${PIP_EXTRA_INDEX_URL:-$PIP_EXTRA}
[[ -n "$PIP_INDEX" && -z "${UV_DEFAULT_INDEX:-}${UV_INDEX_URL:-}" ]] && export UV_DEFAULT_INDEX="$PIP_INDEX"
[[ -n "$PIP_EXTRA" && -z "${UV_INDEX:-}${UV_EXTRA_INDEX_URL:-}" ]] && export UV_INDEX="$PIP_EXTRA"

for arch in x86_64 aarch64; do
  # The existing lock, as the output file, is what uv keeps pins from.
  [[ -f requirements.lock ]] && cp requirements.lock "$WORK/$arch.txt"
  "$WORK/venv/bin/uv" pip compile pyproject.toml --quiet \
    --generate-hashes --only-binary :all: \
    --python-version "$PYTHON_VERSION" --python-platform "$arch-manylinux_$GLIBC" \
    --custom-compile-command hack/lock-requirements.sh --output-file "$WORK/$arch.txt" "$@"
done
if ! cmp -s "$WORK/x86_64.txt" "$WORK/aarch64.txt"; then
  diff -u "$WORK/x86_64.txt" "$WORK/aarch64.txt" >&2 || true
  echo "lock-requirements: x86_64 and aarch64 resolve differently; one lock cannot serve both" >&2
  exit 1
fi
cp "$WORK/x86_64.txt" requirements.lock
echo "requirements.lock: $(grep -c '^[A-Za-z0-9]' requirements.lock) packages, $(grep -c -- '--hash=' requirements.lock) hashes"
