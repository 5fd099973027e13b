"""Fixtures of the SDK tests: a real etcd (one per session), a fresh key prefix per test."""

from iadeep.testing.etcd import etcd_server, etcd_settings, etcd_store  # noqa: F401 - fixtures by name
