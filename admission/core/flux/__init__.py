"""The Flux objects: the table of gated kinds, their kinds of content, what a status serves and
what waits, status conditions, the hold message.

May import admission.core.base; nothing of time, gates or admission.
"""
