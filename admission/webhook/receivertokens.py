"""The receiver's tokens: who a call is, and what it may do (docs/decisions/0065).

``--receiver-token-file`` holds either one bare token, as before (it opens and closes every
gate, and approves nothing), or a YAML list of named tokens, each scoped::

    - name: ci-apps               # the identity its calls are recorded as
      token: 3f9c...              # at least 16 characters
      namespaces: [apps]          # default: every namespace
      gates: [release, web/front] # names (in those namespaces) or namespace/name; default: every gate
      actions: [open, close]      # of open, close, approve; default: open and close

A token is one identity: its approvals are recorded as ``receiver token '<name>'`` (through the
relay, ``... via <the receiver's service account>``), whatever name a caller gives in
``requestedBy``. The file is re-read when it changes; one that cannot be used accepts no token.
"""

from __future__ import annotations

import base64
import hmac
import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass

import yaml

from admission.core.gates.references import is_namespace, is_object_name

log = logging.getLogger("admission.receiver")
IDENTITY = "gate-admission-receiver"  # who a call with the bare token is recorded as
OPEN, CLOSE, APPROVE = "open", "close", "approve"
ACTIONS = (OPEN, CLOSE, APPROVE)
DEFAULT_ACTIONS = frozenset({OPEN, CLOSE})  # approving is granted, never assumed
MIN_TOKEN = 16
MAX_TOKENS = 256
FIELDS = {"name", "token", "namespaces", "gates", "actions"}
_NAME = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$")


@dataclass(frozen=True)
class Token:
    """One token: its name, its secret, and the gates and actions it may use."""

    name: str
    secret: bytes
    namespaces: frozenset[str] | None = None  # None: every namespace
    gates: frozenset[str] | None = None  # "name" or "namespace/name"; None: every gate
    actions: frozenset[str] = DEFAULT_ACTIONS
    bare: bool = False  # the one token of a file that holds nothing else

    @property
    def identity(self) -> str:
        """Who its calls are recorded as: one identity per token."""
        return IDENTITY if self.bare else f"receiver token '{self.name}'"

    def refuses(self, namespace: str, name: str, action: str) -> str | None:
        """Why this token may not ``action`` gate ``namespace/name`` (None: it may)."""
        if action not in self.actions:
            return f"token {self.name!r} may not {action} (it may {', '.join(sorted(self.actions))})"
        if self.namespaces is not None and namespace not in self.namespaces:
            return f"token {self.name!r} may not change gates in namespace {namespace!r}"
        if self.gates is not None and not {name, f"{namespace}/{name}"} & self.gates:
            return f"token {self.name!r} may not change gate {namespace}/{name}"
        return None


def _names(
    entry: dict[str, object], key: str, where: str, valid: Callable[[str], bool]
) -> frozenset[str] | None:
    found = entry.get(key)
    if found is None:
        return None
    if not isinstance(found, list) or not found or not all(isinstance(v, str) and valid(v) for v in found):
        raise ValueError(f"{where}: {key} must be a non-empty list of names")
    return frozenset(found)


def _gate_name(text: str) -> bool:
    namespace, _, name = text.rpartition("/")
    return is_object_name(name) and (not namespace or is_namespace(namespace))


def parse(raw: bytes) -> list[Token]:
    """The tokens a file holds; ValueError says why it cannot be used (then no token is)."""
    text = raw.decode("utf-8", errors="strict").strip()
    if not text:
        raise ValueError("the file is empty")
    if not any(c.isspace() for c in text):  # a YAML list has "- " or line breaks: never a token
        return [Token("receiver", text.encode(), bare=True)]
    try:
        entries = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ValueError(f"not YAML: {str(err).splitlines()[0]}") from None
    if not isinstance(entries, list) or not entries:
        raise ValueError("a token file holds one bare token (no spaces) or a YAML list of tokens")
    if len(entries) > MAX_TOKENS:
        raise ValueError(f"{len(entries)} tokens, more than {MAX_TOKENS}")
    tokens: list[Token] = []
    for number, entry in enumerate(entries, 1):
        where = f"token {number}"
        if not isinstance(entry, dict):
            raise ValueError(
                f"{where}: must be an object with name, token and optionally namespaces, gates, actions"
            )
        unknown = sorted(set(map(str, entry)) - FIELDS)
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {', '.join(unknown)}")
        name, secret = entry.get("name"), entry.get("token")
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(f"{where}: name must be lower-case letters, digits, '-' and '.'")
        where = f"token {name!r}"
        if not isinstance(secret, str) or len(secret) < MIN_TOKEN or any(c.isspace() for c in secret):
            raise ValueError(f"{where}: token must be at least {MIN_TOKEN} characters, without spaces")
        actions = entry.get("actions", sorted(DEFAULT_ACTIONS))
        if not isinstance(actions, list) or not actions or not set(actions) <= set(ACTIONS):
            raise ValueError(f"{where}: actions must be a non-empty list of {', '.join(ACTIONS)}")
        tokens.append(
            Token(
                name,
                secret.encode(),
                _names(entry, "namespaces", where, is_namespace),
                _names(entry, "gates", where, _gate_name),
                frozenset(actions),
            )
        )
    for seen, what in (([t.name for t in tokens], "name"), ([t.secret for t in tokens], "token")):
        if len(set(seen)) != len(seen):
            raise ValueError(f"two tokens have the same {what}")
    return tokens


class TokenFile:
    """The expected bearer token, from a file re-read when its modification time changes."""

    def __init__(self, path: str):
        self.path = path
        self._stamp: tuple[int, int, int, int] | None = None
        self._why: str | None = None
        with open(path, "rb") as handle:  # a missing file is an error at start, not later
            self._token = handle.read().strip()
        if not self._token:
            raise ValueError(f"token file {path} is empty")

    def current(self) -> bytes:
        try:
            st = os.stat(self.path)
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino, st.st_mode)
            if stamp != self._stamp:
                with open(self.path, "rb") as handle:  # a directory, a fifo...: refused below
                    token = handle.read(64 * 1024).strip()
                if not token:
                    raise ValueError("the file is empty")
                self._token, self._stamp = token, stamp
                self._failing(None)
        except FileNotFoundError:
            # Deleted: revoked. (The kubelet updates a mounted Secret by swapping a symlink,
            # so the file never goes missing during an update.)
            self._failing("receiver token file is gone: no token is accepted")
        except (OSError, ValueError) as err:
            # Fail closed: a token that cannot be read now is no token, never the last one read
            # (a file replaced by a directory kept the old token working).
            self._failing(
                f"receiver token file cannot be used: no token is accepted ({type(err).__name__}: {err})"
            )
        return self._token

    def _failing(self, why: str | None) -> None:
        """Accept no token while ``why``; logged once per change of reason."""
        if why is not None:
            self._token, self._stamp = b"", None
        if why != self._why:
            if why is not None:
                log.warning(why, extra={"file": self.path})
            elif self._why is not None:
                log.info("receiver token file usable again", extra={"file": self.path})
            self._why = why

    def matches(self, header: str | None, basic: bool = False) -> bool:
        """Whether an Authorization header carries the token: as a bearer token, or (``basic``)
        as the password of basic auth, whatever the user name (calendar apps send only that).
        Compared in constant time."""
        if not header:
            return False
        if header.startswith("Bearer "):
            given = header[len("Bearer ") :].strip().encode()
        elif basic and header.startswith("Basic "):
            try:
                given = base64.b64decode(header[len("Basic ") :].strip(), validate=True).partition(b":")[2]
            except ValueError:
                return False
        else:
            return False
        expected = self.current()
        return bool(expected) and hmac.compare_digest(given, expected)


class ReceiverTokens(TokenFile):
    """The receiver's tokens, from a file re-read when it changes (as TokenFile): a file whose
    tokens cannot be read accepts none, logged once per change of reason."""

    def __init__(self, path: str):
        super().__init__(path)
        self._parsed_from: bytes | None = None
        self._tokens: list[Token] = []
        self._problem: str | None = None
        self._parsed(self._token)  # a file that cannot be used is an error at start
        if self._problem:
            raise ValueError(self._problem)

    def _parsed(self, raw: bytes) -> list[Token]:
        if raw != self._parsed_from:
            self._parsed_from = raw
            try:
                self._tokens, problem = (parse(raw) if raw else []), None
            except (ValueError, UnicodeDecodeError) as err:
                self._tokens, problem = (
                    [],
                    f"receiver token file cannot be used: no token is accepted ({err})",
                )
            if problem != self._problem and problem is not None:
                log.warning(problem, extra={"file": self.path})
            self._problem = problem
        return self._tokens

    def caller(self, header: str | None) -> Token | None:
        """The token an Authorization header carries as a bearer token (None: none of ours).
        Every token is compared, in constant time each."""
        if not header or not header.startswith("Bearer "):
            return None
        given = header[len("Bearer ") :].strip().encode()
        found = None
        for token in self._parsed(self.current()):
            if hmac.compare_digest(given, token.secret) and found is None:
                found = token
        return found
