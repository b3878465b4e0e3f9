"""The transport: the hardened HTTPS server under the webhook. gunicorn's gthread worker with our
event loop (pre-reading, strict framing, the request target read once, body and connection
limits, slow clients under deadlines, graceful shutdown) and the reloading TLS context.

Imports the standard library, gunicorn and orjson: nothing else of the project (the webhook
imports it, as it imports the core).
"""
