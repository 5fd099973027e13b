"""Test helpers and pytest fixtures shipped with iadeep (import them from a conftest)."""
