"""The core's base: the Flux and gating strings, object metadata, JSON value comparison,
timestamps and durations, lazy values, control characters.

Imports only the standard library: nothing else of the core.
"""
