"""Reading a Prometheus text exposition (the services' ``/metrics``) back into numbers."""

from __future__ import annotations


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``(sample name, sorted (label, value) pairs) -> value`` for every sample in ``text``
    (Prometheus text format 0.0.4, parsed by ``prometheus_client.parser``). A counter's samples
    are named with their ``_total`` / ``_created`` suffix, a histogram's with ``_count``, ``_sum``
    and ``_bucket``.

    Raises:
        ValueError: ``text`` is not in the exposition format.
    """
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}
