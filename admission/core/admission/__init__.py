"""Admission: the AdmissionReview shapes, which requests concern us, what counts as a change, the
decision, what a held status write becomes, the mutation, notices, what waits and half releases.

May import admission.core.gates, admission.core.flux, admission.core.time and admission.core.base.
"""
