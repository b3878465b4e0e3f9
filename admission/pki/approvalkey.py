"""The key the webhook seals approvals with (admission.core.gates.approvalseal): made, and read from a
file (a mounted Secret in a cluster; docs/decisions/0064). The core never reads it itself."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

MIN_BYTES = 32  # a key shorter than SHA-256's block is refused: someone typed it
MAX_BYTES = 4096
FILE_NAME = "approval.key"  # beside the certificates, when `serve --generate-certs` makes one
SECRET_KEY = "key"  # the data key of the Secret the certificate Job creates


def new() -> bytes:
    """A fresh key: 32 random bytes, as 64 hex digits (a Secret's value stays printable)."""
    return secrets.token_hex(32).encode()


def read(path: str | os.PathLike[str]) -> bytes:
    """The key in ``path``; ValueError (or OSError) says why it cannot be used."""
    with open(path, "rb") as handle:
        key = handle.read(MAX_BYTES + 1).strip()
    if len(key) < MIN_BYTES:
        raise ValueError(f"{path}: an approval key needs at least {MIN_BYTES} bytes")
    if len(key) > MAX_BYTES:
        raise ValueError(f"{path}: an approval key is at most {MAX_BYTES} bytes")
    return key


def ensure(path: str | os.PathLike[str]) -> tuple[bytes, bool]:
    """The key in ``path``, made there (owner-only) when missing; and whether it was made."""
    target = Path(path)
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return read(target), False
    with os.fdopen(fd, "wb") as handle:
        handle.write(new())
    return read(target), True
