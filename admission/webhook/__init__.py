"""The HTTP side: AdmissionReview shapes, the handlers, the WSGI app, the receiver's
HTTP endpoints, and the gunicorn TLS server.

May import core, store, observability and pki; never kube or cli.
"""
