"""The CA and serving certificates on disk (cryptography).

May import core only.
"""
