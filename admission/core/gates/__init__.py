"""Gates: a gate's spec and state, opening and closing, approvals, status, the freeze calendar's
spans, and what a Flux object asks of its gates (references).

May import admission.core.flux, admission.core.time and admission.core.base; nothing of admission.
"""
