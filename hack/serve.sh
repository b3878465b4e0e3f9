#!/usr/bin/env bash
# Run the webhook on this machine with the example gates: no cluster needed.
# Makes .venv, installs the project, creates certs/ (CA + serving certificate), serves on :9443.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -x .venv/bin/python ]] || python3 -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check -e .
exec .venv/bin/gate-admission serve --gates-dir "${GATES_DIR:-examples/gates}" --generate-certs \
  --cert-dir certs --address 127.0.0.1 --port "${PORT:-9443}" "$@"
