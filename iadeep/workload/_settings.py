"""Settings of the job reporting SDK, from ``IADEEP_WORKLOAD_*`` variables (``__`` nests).

In a pod the identity comes from the downward API (``IADEEP_WORKLOAD_POD_UID`` from
``metadata.uid``); etcd is configured as for every service (``IADEEP_ETCD_*``, see
:class:`iadeep.state.StateSettings`), and left unset for a local run that only logs.
"""

from __future__ import annotations

import os

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["WorkloadSettings"]


class WorkloadSettings(BaseSettings):
    """How a job reports.

    Attributes:
        pod_uid: the job's pod UID (the key of its records); empty: a local run.
        report_interval_s: seconds between two progress reports (>= 1: the issue's limit of one
            report per second per job keeps etcd's load at one write per job per second).
        watch_idle_s: a batch-size watch idle this long is reopened (a liveness check of etcd;
            the assigned size is read once again after each reopen, so no change is missed).
        use_etcd: report to etcd; ``None`` (default): when ``IADEEP_ETCD_ENDPOINTS`` is set.
    """

    model_config = SettingsConfigDict(env_prefix="IADEEP_WORKLOAD_", env_nested_delimiter="__", extra="ignore")

    pod_uid: str = ""
    report_interval_s: float = Field(1.0, ge=1.0)
    watch_idle_s: float = Field(30.0, gt=0)
    use_etcd: bool | None = None

    def etcd_enabled(self) -> bool:
        """Whether to report to etcd (see ``use_etcd``)."""
        if self.use_etcd is not None:
            return self.use_etcd and bool(self.pod_uid)
        return bool(self.pod_uid) and bool(os.environ.get("IADEEP_ETCD_ENDPOINTS", "").strip())
