"""What the trace loaders skip or flag, and why: one named reason per rule.

Every job a loader leaves out is counted in ``df.attrs["dropped"]`` under one of the reasons
below; every job it keeps but marks is counted in ``df.attrs["flagged"]``. The experiment copies
both into ``summary.json`` (``trace.dropped`` / ``trace.flagged``) and ``report.md``.

*Quirks* are properties of the real traces that contradict the trace's own documentation or
leave a job's run time unknown (an attempt that ends before it starts, a pod still running at the
snapshot). By default each is handled by the rule in :data:`REASONS`; with
``TraceOptions(strict=True)`` (``--strict``) the first quirk raises
:class:`~iadeep.traces.TraceFormatError` naming the file, line and field, like a malformed row.
Filters (``zero_gpu``, ``zero_duration`` and the options' cuts) are not quirks: strict mode
applies them as usual.

Malformed rows (a value that is not a number, a missing id, ...) are a different matter: they
raise :class:`~iadeep.traces.TraceFormatError` unless ``skip_bad_rows``, and are counted in
``df.attrs["skipped_rows"]``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Reason", "REASONS", "QUIRKS", "reason_table"]


@dataclass(frozen=True)
class Reason:
    """One named rule of the taxonomy.

    Attributes:
        name: the key used in ``dropped`` / ``flagged`` counts.
        action: ``"drop"`` (the job is left out) or ``"flag"`` (kept and marked).
        quirk: whether ``strict`` turns it into a :class:`~iadeep.traces.TraceFormatError`.
        formats: trace formats (or ``"experiment"``) that apply the rule.
        rule: what is detected and what is done about it.
    """

    name: str
    action: str
    quirk: bool
    formats: tuple[str, ...]
    rule: str


_ALL = ("philly", "philly-json", "ms-itp", "openb")

#: The taxonomy, by name (iteration order: loader rules, then option filters, then the experiment).
REASONS: dict[str, Reason] = {
    r.name: r
    for r in (
        Reason("zero_gpu", "drop", False, _ALL, "the job asks for no GPU (CPU-only pods, num_gpus 0)"),
        Reason("no_attempts", "drop", True, ("philly-json",),
               "the job has no attempt at all (it never ran; the trace README allows it)"),
        Reason("never_scheduled", "drop", True, ("philly-json", "openb"),
               "the job never started: openb's empty scheduled_time (Pending pods); Philly attempts none "
               "of which has a start_time"),
        Reason("invalid_attempt_times", "drop", True, ("philly-json", "openb"),
               "an attempt ends before it starts (Philly end_time < start_time; openb deletion_time < "
               "scheduled_time): the job's run time is unknown, the whole job is left out"),
        Reason("missing_attempt_times", "drop", True, ("philly-json",),
               "attempts started but none has both a start_time and an end_time, and the last one is not "
               "running at the snapshot (logging gaps): run time unknown"),
        Reason("zero_duration", "flag", False, _ALL,
               "the job ran for 0 s and is not censored: a real job that completes at once, kept (it counts "
               "in the completed jobs and the JCT statistics); option drop_zero_duration "
               "(--drop-zero-duration) drops it instead"),
        Reason("censored", "flag", True, ("philly-json", "openb"),
               "still running when the trace was taken (Philly: the last attempt has a start_time and no "
               "end_time, or ends at the log's last timestamp; openb: pod_phase Running and deletion_time at the snapshot, the file's latest "
               "deletion_time): kept with censored=True and the observed run time (to the snapshot) as a "
               "lower bound of its duration, 0 s for one started at the snapshot"),
        Reason("inconsistent_gpu_milli", "flag", True, ("openb",),
               "a multi-GPU pod (num_gpu > 1) with gpu_milli < 1000; the trace README documents gpu_milli "
               "for GPU-sharing pods (num_gpu == 1) only, multi-GPU pods take whole GPUs: kept with "
               "gpu_milli 1000"),
        Reason("other_virtual_cluster", "drop", False, ("philly", "philly-json", "ms-itp"),
               "option virtual_cluster: another virtual cluster"),
        Reason("outside_window", "drop", False, _ALL, "options window_start_s / window_end_s"),
        Reason("too_many_gpus", "drop", False, _ALL, "option max_gpus: more GPUs than asked for"),
        Reason("wider_than_cluster", "drop", False, _ALL + ("experiment",),
               "more GPUs than the cluster has (or more GPUs of its required model than the cluster "
               "has): it could never run (option cluster_gpus, or the experiment's cluster)"),
        Reason("exceeds_gpu_memory", "drop", False, ("experiment",),
               "the memory estimate of the job's assigned model and batch size is above every GPU it "
               "accepts: it could never run"),
        Reason("before_start_job", "drop", False, _ALL, "option start_job"),
        Reason("after_n_jobs", "drop", False, _ALL, "option n_jobs"),
    )
}

#: Names of the reasons that ``strict`` turns into errors.
QUIRKS = frozenset(n for n, r in REASONS.items() if r.quirk)


def reason_table() -> str:
    """The taxonomy as a markdown table (for the README and ``report.md``)."""
    rows = ["| reason | action | quirk (`--strict` fails) | formats | rule |", "|---|---|---|---|---|"]
    for r in REASONS.values():
        rows.append(f"| `{r.name}` | {r.action} | {'yes' if r.quirk else 'no'} | {', '.join(r.formats)} | {r.rule} |")
    return "\n".join(rows)
