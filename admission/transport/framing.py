"""How the worker's loop frames a request's head: exactly as gunicorn will read it, or refused."""

from __future__ import annotations

MAX_LENGTH_DIGITS = 10  # a Content-Length of more digits is padded or absurd (the body limit has 7)

_FRAMING = (b"content-length", b"transfer-encoding")


class Refused(Exception):
    """A request the loop answers with ``status`` and closes, before any thread sees it."""

    def __init__(self, status: int, why: str):
        super().__init__(why)
        self.status, self.why = status, why


def framing(head: bytes) -> tuple[int, bytes | None]:
    """The body length of the request whose request line and headers are ``head`` (without the
    blank line), read exactly as gunicorn will read it; and, when the request asks for
    ``100-continue``, ``head`` without that header (the loop answers it; gunicorn must not again).
    A request the two could frame differently is refused (``Refused``). Other malformed header
    lines are left to gunicorn, which refuses them (400) before reading any body."""
    # Strict because a request the loop and gunicorn framed differently would send a thread
    # reading, blocking, the body the loop did not wait for.
    lines = head.split(b"\r\n")
    length, expect = None, []
    for number in range(1, len(lines)):
        name, _, value = lines[number].partition(b":")
        name = name.lower()
        if name == b"content-length":
            value = value.strip(b" \t")
            if length is not None:
                raise Refused(400, "more than one Content-Length")
            if not (0 < len(value) <= MAX_LENGTH_DIGITS and value.isdigit()):
                raise Refused(400, f"Content-Length must be 1 to {MAX_LENGTH_DIGITS} digits")
            length = int(value)
        elif name == b"transfer-encoding":
            raise Refused(411, "send a Content-Length; Transfer-Encoding is not accepted")
        elif name == b"expect":
            if value.strip(b" \t").lower() == b"100-continue" and lines[0].endswith(b" HTTP/1.1"):
                expect.append(number)
        elif (
            name.strip(b" \t") in _FRAMING
        ):  # gunicorn refuses it, but the loop must not read a body for it either
            raise Refused(400, f"whitespace around the header name {name.strip().decode('latin-1')!r}")
    if not expect:
        return length or 0, None
    return length or 0, b"\r\n".join(line for number, line in enumerate(lines) if number not in expect)
