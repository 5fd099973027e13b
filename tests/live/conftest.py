"""Fixtures of the live-backend tests: the control-plane binaries (skip, or fail under CI, when
``make controlplane`` has not run) and the session's dataset cache."""

from __future__ import annotations

from iadeep.testing.controlplane import controlplane_binaries  # noqa: F401 - pytest finds fixtures by name
