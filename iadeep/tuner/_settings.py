"""Settings of the tuner service, from ``IADEEP_TUNER_*`` variables (``__`` nests groups)::

    IADEEP_TUNER_HOST=127.0.0.1
    IADEEP_TUNER_PORT=8890
    IADEEP_TUNER_STORAGE_URL=sqlite:////var/lib/iadeep/tuner.db
    IADEEP_TUNER_THROUGHPUTS_FILE=/etc/iadeep/simulation_throughputs.json
    IADEEP_TUNER_STOP__BUDGET=3
"""

from __future__ import annotations

from pathlib import Path

import platformdirs
from pydantic import BaseModel, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from iadeep._serving import LogLevel
from iadeep.tuning import DEFAULT_TRIALS

__all__ = ["TunerSettings", "StopSettings", "default_storage_url"]


class StopSettings(BaseModel):
    """The stop rule of every session (see :class:`iadeep.tuner.StopRule`); also the body of a
    session request's ``stop``.

    Attributes:
        budget: most measured trials per session (each costs a measurement window of live jobs);
            default :data:`iadeep.tuner.DEFAULT_TRIALS` (3), the simulator's too, so that both
            backends run sessions of the same length.
        patience: measured trials in a row without a 1 % improvement that end a session.
        min_improvement: relative improvement that counts.
    """

    budget: int = Field(DEFAULT_TRIALS, ge=1)
    patience: int = Field(4, ge=1)
    min_improvement: float = Field(0.01, ge=0, lt=1)


def default_storage_url() -> str:
    """SQLite in the user's state folder (``~/.local/state/iadeep/tuner.db`` on Linux)."""
    folder = Path(platformdirs.user_state_dir("iadeep"))
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder / 'tuner.db'}"


class TunerSettings(BaseSettings):
    """The tuner service.

    Attributes:
        host / port: where it listens (loopback by default; the Deployment sets 0.0.0.0 in the pod).
        storage_url: optuna RDB storage (SQLAlchemy URL); empty: :func:`default_storage_url`.
        throughputs_file: Gavel ``simulation_throughputs.json`` (job types, isolated steps/s,
            which pairs fit); required.
        gpu_type: which GPU's measurements to use.
        stop: the stop rule.
        seed: the samplers' seed.
        log_level: Python logging level.
    """

    model_config = SettingsConfigDict(env_prefix="IADEEP_TUNER_", env_nested_delimiter="__", extra="ignore")

    host: str = "127.0.0.1"
    port: int = Field(8890, ge=0, le=65535)
    storage_url: str = ""
    throughputs_file: Path | None = None
    gpu_type: str = "v100"
    stop: StopSettings = Field(default_factory=StopSettings)
    seed: int = 0
    log_level: LogLevel = "INFO"
