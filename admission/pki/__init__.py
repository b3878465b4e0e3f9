"""The CA and serving certificates on disk (cryptography).

May import the clock and core.
"""
