"""The webhook's seal on an approval (pure: the key is passed in; docs/decisions/0064).

Anyone who may patch a Gate can write an approval annotation with any ``by`` and ``at`` while
the approval webhook entries are absent (break-glass, a reinstall, an upgrade from a build
without them). Only a value the webhook recorded may count, so the webhook seals what it
records: an HMAC-SHA256, under a key only the server holds, of the Gate's uid, the annotation's
key and the whole value but the seal itself, in one canonical form. Every field is sealed,
whatever fields an approval has now or later, so no field can be changed, added or dropped;
the uid and key bind it to one Gate and one annotation, so a sealed value copied to another
Gate (or to the same Gate deleted and created again) or under another key does not verify.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Mapping

FIELD = "seal"  # where the seal lives in an approval's value
VERSION = "v1"  # the seal's format: a reader refuses one it does not know
# The reasons a seal does not verify; NO_KEY is not the approval's fault but the reader's.
NO_KEY = "it cannot be verified here: this reader holds no approval key"
NO_UID = "the Gate has no uid to bind it to"
UNSEALED = "it carries no seal: the webhook did not record it"
MISMATCH = (
    "its seal does not verify: it was written or changed without the webhook, "
    "copied from another Gate or annotation, or sealed with another key"
)


def canonical(gate_uid: str, key: str, fields: Mapping[str, object]) -> bytes:
    """The bytes a seal is computed over: the format, the Gate's uid, the annotation's key, and
    every field of the value but the seal, in sorted order with no insignificant space. ASCII
    with escapes: any string JSON can carry (a lone surrogate too) has one spelling here."""
    body = {name: value for name, value in fields.items() if name != FIELD}
    document = [VERSION, gate_uid, key, body]
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def seal(secret: bytes, gate_uid: str, key: str, fields: Mapping[str, object]) -> str:
    """The seal of ``fields`` recorded as annotation ``key`` on the Gate with ``gate_uid``."""
    digest = hmac.new(secret, canonical(gate_uid, key, fields), hashlib.sha256).digest()
    return f"{VERSION}:" + base64.urlsafe_b64encode(digest).decode().rstrip("=")


def unverified(secret: bytes | None, gate_uid: str, key: str, fields: Mapping[str, object]) -> str | None:
    """Why ``fields`` (an approval's value, seal included) is not one the webhook sealed, or None
    when it is. Compared in constant time."""
    if not secret:
        return NO_KEY
    if not gate_uid:
        return NO_UID
    given = fields.get(FIELD)
    if not isinstance(given, str) or not given:
        return UNSEALED
    if not given.isascii():  # never one of ours
        return MISMATCH
    expected = seal(secret, gate_uid, key, fields)
    return None if hmac.compare_digest(given.encode(), expected.encode()) else MISMATCH
