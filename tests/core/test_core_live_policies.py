"""Every policy runs live as it is simulated: each policy whose tuning does anything in the
simulator (it overrides :meth:`iadeep.policy.Policy.tune`: iadeep's batch-size sessions, gandiva's
profile and undo) gets the node coordinator in the live backend (``TUNED_POLICIES``, which also
decides whether ``compare``'s simulator runs tune), and the session kind its extender publishes is
one the coordinator runs."""

from __future__ import annotations

from iadeep.experiment._live import TUNED_POLICIES
from iadeep.policy import POLICIES, Policy
from iadeep.state import SESSION_KINDS


def test_the_live_backend_runs_the_coordinator_for_every_policy_that_tunes():
    tunes = {name for name, cls in POLICIES.items() if cls.tune is not Policy.tune}
    assert tunes == set(TUNED_POLICIES) == {"iadeep", "gandiva"}


def test_each_policy_names_a_session_the_coordinator_runs():
    kinds = {name: cls.node_session for name, cls in POLICIES.items()}
    assert set(kinds.values()) <= set(SESSION_KINDS)
    assert kinds["gandiva"] == "profile" and kinds["iadeep"] == "tune"
    assert POLICIES["gandiva"].undo_below == 1.0  # Gandiva's threshold: worse than taking turns
