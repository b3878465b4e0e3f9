"""The HTTP side: AdmissionReview shapes, the handlers, the WSGI app, the receiver's
HTTP endpoints, and the gunicorn configuration that serves them over admission.transport.

May import core, transport, store, observability and pki; never kube or cli.
"""
