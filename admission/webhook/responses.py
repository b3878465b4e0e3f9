"""JSON answers of the Flask routes (health, calendar, receiver, errors), written one way."""

from __future__ import annotations

from collections.abc import Mapping

import orjson
from flask import Response


def json_response(payload: Mapping[str, object], status: int = 200, **headers: str) -> Response:
    """``payload`` as a JSON response with ``status`` and ``headers``."""
    return Response(orjson.dumps(payload), status=status, mimetype="application/json", headers=headers)
