"""What a training script imports to take part in IADeep's loop (the job reporting SDK).

A job registers, reports its progress (samples, steps/s) at most once per second to the shared
state, learns the batch size the node coordinator assigns it from a watch (never a read per
step), switches to it at the next step boundary, and reports its completion. With no etcd
configured it only logs (a local run)::

    from iadeep.workload import Job

    with Job.from_env(batch_size=64) as job:
        while not finished:
            train_one_step(batch_size=job.batch_size)
            job.step()          # counts the step; applies a new batch size here
"""

from iadeep.workload._job import Job, JobStats
from iadeep.workload._settings import WorkloadSettings

__all__ = ["Job", "JobStats", "WorkloadSettings"]
