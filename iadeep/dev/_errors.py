"""Errors raised by :mod:`iadeep.dev`."""

from __future__ import annotations


class ControlPlaneError(RuntimeError):
    """The local control plane could not be found, started or reached."""
