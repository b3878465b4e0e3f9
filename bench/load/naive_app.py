"""The naive floor: an allow-all validating webhook written the obvious way.

Served by gunicorn with ``--worker-class gthread --workers 2 --threads 8 --certfile --keyfile``
and otherwise gunicorn's defaults (see bench/load/run.py). It decides nothing: it parses the
review with ``request.get_json()`` and answers ``allowed: true`` with ``jsonify``, which is what
any Flask webhook must at least do per request.
"""

from flask import Flask, jsonify, request

app = Flask(__name__)


@app.post("/validate")
def validate():
    review = request.get_json()
    return jsonify(
        {
            "apiVersion": review["apiVersion"],
            "kind": "AdmissionReview",
            "response": {"uid": review["request"]["uid"], "allowed": True},
        }
    )
