"""Test doubles of the Flux controllers: they write to the real API server exactly as
/work/shared/FLUX-WRITES.md (../shared/FLUX-WRITES.md) says each controller does.

They are doubles, written in this project from those facts, not Flux code: no Git, Helm or
registry behind them. What a test "pushes" (a commit, a chart version, an image tag) is held
in memory; what they "apply" is recorded in a ConfigMap and in ``Double.applied``, so a test
sees what was deployed. Where the real controllers differ in detail that no hold point rests
on (event reasons, message wording beyond FLUX-WRITES.md), the doubles say so.

Proven against the real ones: tests/realflux/test_doubles.py runs one scenario with the real
source-controller, kustomize-controller and helm-controller and with these doubles, and compares
the status writes each makes as admission sees them. The image-reflector-controller double has
no such comparison; tests/realflux/test_images.py runs the real one through the same hold.
Used by tests/e2e/test_content_holds.py, tests/e2e/test_hold_notifications.py and
bench/release_latency.py.
"""
