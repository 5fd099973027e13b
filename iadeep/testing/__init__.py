"""Test helpers and pytest fixtures shipped with iadeep (import them from a conftest)."""

from iadeep.testing._wait import wait_for

__all__ = ["wait_for"]
