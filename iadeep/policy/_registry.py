"""Registry of policies by name: a new policy is one module plus one ``@register`` line."""

from __future__ import annotations

from typing import Any

from iadeep.interference import InterferenceModel
from iadeep.policy._base import Policy

__all__ = ["register", "make_policy", "policy_names", "POLICIES"]

POLICIES: dict[str, type[Policy]] = {}


def register(cls: type[Policy]) -> type[Policy]:
    """Class decorator adding ``cls`` under ``cls.name``.

    Raises:
        ValueError: empty or duplicate name.
    """
    if not cls.name or cls.name in POLICIES:
        raise ValueError(f"policy name {cls.name!r} is empty or already registered")
    POLICIES[cls.name] = cls
    return cls


def policy_names() -> list[str]:
    """Registered names, in registration order."""
    return list(POLICIES)


def make_policy(name: str, model: InterferenceModel, **options: Any) -> Policy:
    """Instantiate the policy registered as ``name``.

    Raises:
        KeyError: unknown name (the message lists the known ones).
    """
    try:
        cls = POLICIES[name]
    except KeyError:
        raise KeyError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}") from None
    return cls(model, **options)
