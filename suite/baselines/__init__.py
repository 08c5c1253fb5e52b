"""Baseline plugins: ``Baseline`` is the contract, ``registry`` finds them by entry point."""

from suite.baselines.base import Baseline, Supports, Unavailable

__all__ = ["Baseline", "Supports", "Unavailable"]
