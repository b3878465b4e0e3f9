"""Test doubles of the Flux controllers: they write to the real API server exactly as
/work/shared/FLUX-WRITES.md (../shared/FLUX-WRITES.md) says each controller does.

They are doubles, written in this project from those facts, not Flux code: no Git, Helm or
registry behind them. What a test "pushes" (a commit, a chart version, an image tag) is held
in memory; what they "apply" is recorded in a ConfigMap and in ``Double.applied``, so a test
sees what was deployed. Where the real controllers differ in detail that no hold point rests
on (event reasons, message wording beyond FLUX-WRITES.md), the doubles say so.
"""
