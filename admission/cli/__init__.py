"""The commands: ``gate-admission`` and ``kubectl gate``; they wire the other layers together.

May import every layer; nothing imports it.
"""
