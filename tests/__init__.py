"""The test suite. ROOT: the repository, which tests read (docs, manifests, the chart)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
