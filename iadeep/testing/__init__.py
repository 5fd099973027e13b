"""Test helpers and pytest fixtures shipped with iadeep (import them from a conftest)."""

from iadeep.testing._net import free_port
from iadeep.testing._wait import wait_for

__all__ = ["free_port", "wait_for"]
