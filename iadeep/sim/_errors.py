"""Errors of the simulator."""

from __future__ import annotations

__all__ = ["InfeasibleJobError"]


class InfeasibleJobError(ValueError):
    """A job can never run on the simulated cluster (raised before the run starts).

    Attributes:
        job_id: the first such job.
        reason: the taxonomy reason (:data:`iadeep.traces.REASONS`): ``"wider_than_cluster"``
            (more GPUs, or more GPUs of its required model, than the cluster has) or
            ``"exceeds_gpu_memory"`` (its memory estimate is above every GPU's memory).
        count: how many jobs of the table are infeasible for any reason.
    """

    def __init__(self, job_id: str, reason: str, detail: str, count: int = 1) -> None:
        self.job_id, self.reason, self.count = job_id, reason, count
        more = f" ({count - 1} more infeasible job(s))" if count > 1 else ""
        super().__init__(f"job {job_id} can never run ({reason}): {detail}{more}; drop such jobs first "
                         f"(iadeep.sim.feasibility) or pass infeasible='skip'")

    def __reduce__(self):  # picklable for worker processes
        return (_rebuild, (self.job_id, self.reason, self.args[0], self.count))


def _rebuild(job_id: str, reason: str, message: str, count: int) -> InfeasibleJobError:
    err = InfeasibleJobError.__new__(InfeasibleJobError)
    ValueError.__init__(err, message)
    err.job_id, err.reason, err.count = job_id, reason, count
    return err
