"""Test helpers and pytest fixtures shipped with iadeep (import them from a conftest)."""

from iadeep._host import free_port
from iadeep.testing._data import fetch_dataset
from iadeep.testing._wait import wait_for

__all__ = ["fetch_dataset", "free_port", "wait_for"]
