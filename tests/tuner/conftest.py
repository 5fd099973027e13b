"""Fixtures of the tuner tests: the real Gavel measurements."""

from iadeep.testing.data import interference_model, throughputs_path  # noqa: F401 - fixtures by name
