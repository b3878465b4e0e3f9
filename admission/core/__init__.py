"""The pure core: names, time, schedules, gate evaluation, policies, changes and decisions.

Imports only the standard library, cronsim and itself: no clock, I/O, network or environment;
every function that needs the time takes ``now``. Inside, five subpackages in layers (pyproject.toml's
import-linter contracts): ``admission`` > ``gates`` > ``flux`` | ``time`` > ``base``.
"""
