"""flux-gate-admission: admission gates for Flux CD objects."""

__version__ = "0.2.0"
