"""The etcd backend: etcd's v3 JSON gateway over HTTP, with retries, failover, auth and watch streams.

:class:`EtcdBackend` is :class:`iadeep.state._kv.KVBackend` over etcd, the backend
:class:`iadeep.state.EtcdStateStore` hands to the store: one HTTP session per thread
(``requests.Session`` is not documented thread-safe), the ``/v3/`` calls (range, transaction, lease) retried with tenacity (exponential backoff with
jitter, failover to the next endpoint) within the caller's deadline, the auth token renewed when
etcd refuses it, and ``/v3/watch`` streams reopened from the last revision they delivered. The
gateway's JSON for the protocol's operations, compares and answers is :mod:`iadeep.state._etcdjson`.

Raises (from its calls): :class:`iadeep.state.StoreUnavailable` naming the endpoints when the
retries run out; :class:`iadeep.state.TransactionTooLarge` for a transaction over etcd's
``--max-txn-ops``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import threading
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import requests
import urllib3
from etcd3gw import exceptions as etcd_exc
from etcd3gw.client import Etcd3Client
from requests.adapters import HTTPAdapter
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_before_delay,
    wait_exponential,
    wait_random,
)

from iadeep.state._protocol import (
    HistoryCompacted,
    StoreUnavailable,
    TransactionTooLarge,
)
from iadeep.state._etcdjson import b64 as _b64, compare_json, kv_of as _kv, op_json, range_end as _range_end, response_of
from iadeep.state._kv import KV, Compare, Event, Op, TxnResult, WatchBatch
from iadeep.state._settings import StateSettings

__all__ = ["EtcdBackend"]

log = logging.getLogger("iadeep.state._etcd")

R = TypeVar("R")

_API = "/v3/"
_PAGE = 1000  # keys per range page


class _Transient(Exception):
    """A failure worth retrying (connection, timeout, 5xx, expired token)."""

    def __init__(self, endpoint: str, detail: str) -> None:
        super().__init__(f"{endpoint}: {detail}")
        self.endpoint = endpoint


@dataclass
class _Conn:
    """One thread's client of one endpoint and the auth-token generation its session carries."""

    client: Etcd3Client
    token_gen: int = -1


class EtcdBackend:
    """:class:`~iadeep.state._kv.KVBackend` over one set of etcd endpoints (module docstring).

    Args:
        settings: endpoints (at least one), TLS, auth, timeouts and retries.
    """

    def __init__(self, settings: StateSettings) -> None:
        self.settings = settings
        self.endpoints: tuple[str, ...] = tuple(settings.endpoints)
        self._preferred = 0
        self._tls = threading.local()
        self._lock = threading.Lock()
        self._sessions: weakref.WeakSet[requests.Session] = weakref.WeakSet()  # a dead thread's go with it
        self._token: str | None = None
        self._token_gen = 0
        self._stats = {"requests": 0, "retries": 0}
        self._closed = False
        self._cluster_id: str | None = None  # etcd's cluster ID as first seen by a strict watch

    # -- transport --------------------------------------------------------------------------

    def _new_session(self) -> requests.Session:
        s = requests.Session()
        s.trust_env = False  # never through an HTTP proxy, never ~/.netrc
        tls = self.settings.tls
        s.verify = str(tls.ca_file) if tls.ca_file else True
        if tls.cert_file and tls.key_file:
            s.cert = (str(tls.cert_file), str(tls.key_file))
        adapter = HTTPAdapter(pool_connections=len(self.endpoints), pool_maxsize=2, max_retries=0)
        s.mount("http://", adapter)
        s.mount("https://", adapter)
        with self._lock:
            if self._closed:
                s.close()
                raise StoreUnavailable(f"etcd store for {self._where()} is closed")
            self._sessions.add(s)
        return s

    def _conn(self, endpoint: str) -> _Conn:
        """This thread's client of ``endpoint``, authenticated when users are configured."""
        conns: dict[str, _Conn] | None = getattr(self._tls, "conns", None)
        if conns is None:
            conns = self._tls.conns = {}
        conn = conns.get(endpoint)
        if conn is None:
            u = urlsplit(endpoint)
            t = self.settings.timeouts
            client = Etcd3Client(
                host=u.hostname or "",
                port=u.port or 2379,
                protocol=u.scheme,
                timeout=(t.connect_s, t.request_s),  # type: ignore[arg-type] # requests takes a pair
                api_path=_API,
                session=self._new_session(),
            )
            conn = conns[endpoint] = _Conn(client)
        if self.settings.auth.username is not None:
            if self._token is None:
                self._authenticate(endpoint, conn.client, -1)
            if conn.token_gen != self._token_gen:
                with self._lock:
                    conn.client.session.headers["Authorization"] = self._token or ""
                    conn.token_gen = self._token_gen
        return conn

    def _authenticate(self, endpoint: str, client: Etcd3Client, failed_gen: int) -> None:
        """Trade user and password for a token (once for all threads)."""
        auth = self.settings.auth
        with self._lock:
            if self._token is not None and self._token_gen != failed_gen:
                return  # another thread already renewed it
            password = auth.password.get_secret_value() if auth.password else ""
            try:
                resp = client.session.post(
                    client.get_url("/auth/authenticate"),
                    json={"name": auth.username, "password": password},
                    headers={"Authorization": None},  # type: ignore[dict-item] # drops the stale token
                    timeout=client.timeout,
                )
            except requests.RequestException as exc:
                raise _Transient(endpoint, f"authenticate: {type(exc).__name__}: {exc}") from None
            if resp.status_code >= 500:
                raise _Transient(endpoint, f"authenticate: HTTP {resp.status_code}: {resp.text.strip()}")
            if resp.status_code != 200:
                message = self._message(resp.text)
                if "CommonName" in message:
                    message += " (etcd's JSON gateway refuses password auth when --client-cert-auth is on: use one)"
                raise StoreUnavailable(f"etcd at {endpoint} refused user {auth.username!r}: {message}")
            self._token = str(resp.json()["token"])
            self._token_gen += 1

    @staticmethod
    def _message(text: str | None) -> str:
        """etcd's error message from a gateway answer, or the gist of a connection error."""
        try:
            return str(json.loads(text or "")["message"])
        except (ValueError, KeyError, TypeError):
            text = (text or "").strip()
            errno = re.search(r"\[Errno -?\d+\] [^'\")]+", text)
            if errno:
                return errno.group(0)
            return text if len(text) <= 300 else text[:297] + "..."

    @contextlib.contextmanager
    def deadline(self, seconds: float) -> Iterator[None]:
        """Bound every request this thread makes inside the block to end within ``seconds``
        from now (nested blocks keep the earlier deadline): the per-request timeouts shrink to
        the time left, no retry starts past it, and a request with no time left fails at once
        with :class:`StoreUnavailable`. A caller with a budget of its own (the extender answering
        kube-scheduler within ``httpTimeout``) derives the store's deadline from it.

        Note that a transaction sent before the deadline may still commit after it (etcd got it
        and was slow): the caller must treat such a failure as "maybe done".
        """
        previous = getattr(self._tls, "deadline", None)
        end = time.monotonic() + seconds
        self._tls.deadline = end if previous is None else min(previous, end)
        try:
            yield
        finally:
            self._tls.deadline = previous

    def _left(self) -> float | None:
        """Seconds left before this thread's :meth:`deadline` (``None``: no deadline)."""
        end = getattr(self._tls, "deadline", None)
        return None if end is None else end - time.monotonic()

    def _post_once(self, path: str, payload: Mapping[str, Any]) -> dict[str, Any]:
        endpoint = self.endpoints[self._preferred % len(self.endpoints)]
        with self._lock:
            self._stats["requests"] += 1
        try:
            conn = self._conn(endpoint)
            client, gen = conn.client, conn.token_gen
            t = self.settings.timeouts
            left = self._left()
            if left is not None and left <= 0:
                raise _Transient(endpoint, "deadline reached")
            # the client is this thread's own: its timeout may follow this thread's deadline
            client.timeout = (t.connect_s, t.request_s) if left is None else (  # type: ignore[assignment]
                min(t.connect_s, left), min(t.request_s, left))
            return dict(client.post(client.get_url(path), json=payload))
        except (etcd_exc.ConnectionFailedError, etcd_exc.ConnectionTimeoutError, etcd_exc.InternalServerError) as exc:
            raise _Transient(endpoint, f"{type(exc).__name__}: {self._message(exc.detail_text)}") from None
        except etcd_exc.Etcd3Exception as exc:
            message = self._message(exc.detail_text)
            if "too many operations in txn request" in message:
                sizes = {k: len(payload.get(k) or ()) for k in ("compare", "success", "failure")}
                raise TransactionTooLarge(
                    f"etcd at {endpoint} refused a transaction of {max(sizes.values())} operations ({message}): its "
                    f"--max-txn-ops is below this store's max_txn_ops={self.settings.max_txn_ops} "
                    "(IADEEP_ETCD_MAX_TXN_OPS): set them equal") from None
            if "invalid auth token" in message or "revision in header is old" in message:
                self._authenticate(endpoint, client, gen)
                raise _Transient(endpoint, message) from None
            raise StoreUnavailable(f"etcd at {endpoint} rejected {path}: {message}") from None
        except requests.RequestException as exc:  # broken responses etcd3gw does not map
            raise _Transient(endpoint, f"{type(exc).__name__}: {exc}") from None
        except ValueError as exc:  # not JSON
            raise StoreUnavailable(f"etcd at {endpoint}: unreadable answer to {path}: {exc}") from None

    def _where(self) -> str:
        return ", ".join(self.endpoints)

    def _before_retry(self, state: RetryCallState) -> None:
        with self._lock:
            self._stats["retries"] += 1
            self._preferred += 1  # fail over to the next endpoint (a no-op with one)
        exc = state.outcome.exception() if state.outcome else None
        log.debug("etcd request failed (try %d), retrying: %s", state.attempt_number, exc)

    def _post(self, path: str, payload: Mapping[str, Any]) -> tuple[dict[str, Any], int]:
        """POST to the gateway with retries; returns the answer and the number of tries.

        Raises:
            StoreUnavailable: retries exhausted, or etcd refused the request.
        """
        if self._closed:
            raise StoreUnavailable(f"etcd store for {self._where()} is closed")
        r = self.settings.retry
        left = self._left()
        if left is not None and left <= 0:
            raise StoreUnavailable(f"etcd at {self._where()}: no time left in the caller's budget ({path})")
        budget = r.deadline_s if left is None else min(r.deadline_s, left)
        retrying = Retrying(
            # no retry that would start past the deadline (the wait before it included)
            stop=stop_after_attempt(r.attempts) | stop_before_delay(budget),
            wait=wait_exponential(multiplier=r.initial_backoff_s, max=r.max_backoff_s) + wait_random(0, r.initial_backoff_s),
            retry=retry_if_exception_type(_Transient),
            before_sleep=self._before_retry,
            reraise=True,
        )
        t0 = time.monotonic()
        tries = 0
        try:
            for attempt in retrying:
                with attempt:
                    tries = attempt.retry_state.attempt_number
                    result = self._post_once(path, payload)
        except _Transient as exc:
            raise StoreUnavailable(
                f"etcd at {self._where()} unavailable after {tries} tr{'y' if tries == 1 else 'ies'} in "
                f"{time.monotonic() - t0:.2f} s ({path}): {exc}"
            ) from None
        return result, tries

    # -- the protocol -----------------------------------------------------------------------

    @property
    def name(self) -> str:
        return f"etcd at {self._where()}"

    @property
    def max_txn_ops(self) -> int:
        return self.settings.max_txn_ops

    def txn(self, compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op] = ()) -> TxnResult:
        """One ``/v3/kv/txn`` (see :meth:`KVBackend.txn`), retried on transient errors
        (``retried`` says so).

        Raises:
            TransactionTooLarge: etcd's ``--max-txn-ops`` is below the transaction's size.
            StoreUnavailable: retries exhausted, or etcd refused it.
        """
        result, tries = self._post("/kv/txn", {"compare": [compare_json(c) for c in compares],
                                               "success": [op_json(o) for o in success],
                                               "failure": [op_json(o) for o in failure]})
        return TxnResult(bool(result.get("succeeded", False)), int(result["header"]["revision"]),
                         [response_of(r) for r in result.get("responses", [])], tries > 1)

    def range(self, key: str, *, prefix: bool = False) -> tuple[list[KV], int]:
        """One key (a plain range), or every key under a prefix, paged (:data:`_PAGE` keys a
        request) at the revision of the first page."""
        if prefix:
            return self._scan_at(key)
        result, _ = self._post("/kv/range", {"key": _b64(key)})
        return [_kv(d) for d in result.get("kvs", [])], int(result["header"]["revision"])

    def ranges(self, prefixes: Sequence[str]) -> tuple[list[list[KV]], int]:
        """One paged range read per prefix, all at the revision of the first."""
        revision: int | None = None
        out = []
        for p in prefixes:
            kvs, revision = self._scan_at(p, revision)
            out.append(kvs)
        return out, int(revision or self.revision())

    def _scan_at(self, prefix: str, revision: int | None = None) -> tuple[list[KV], int]:
        """Every key under ``prefix`` at ``revision`` (``None``: the current one), by key, paged;
        returns the keys and the revision read."""
        out: list[KV] = []
        payload: dict[str, Any] = {"key": _b64(prefix), "range_end": _range_end(prefix), "limit": _PAGE}
        if revision is not None:
            payload["revision"] = revision
        while True:
            result, _ = self._post("/kv/range", payload)
            kvs = [_kv(d) for d in result.get("kvs", [])]
            out.extend(kvs)
            payload.setdefault("revision", int(result["header"]["revision"]))
            if not result.get("more") or not kvs:
                return out, int(payload["revision"])
            payload["key"] = _b64(kvs[-1].key.encode() + b"\0")

    def grant(self, ttl_s: int) -> int:
        granted, _ = self._post("/lease/grant", {"TTL": int(ttl_s), "ID": 0})
        return int(granted["ID"])

    def keepalive(self, lease: int) -> bool:
        result, _ = self._post("/lease/keepalive", {"ID": lease})
        return int(result.get("result", {}).get("TTL", -1)) > 0

    def revoke(self, lease: int) -> None:
        """End ``lease``; etcd's refusal (already expired) is no error."""
        with contextlib.suppress(StoreUnavailable):
            self._post("/lease/revoke", {"ID": lease})

    def revision(self) -> int:
        """etcd's current revision (one linearizable read)."""
        result, _ = self._post("/kv/range", {"key": _b64(self.settings.prefix), "count_only": True})
        return int(result["header"]["revision"])

    def watch(self, prefixes: Sequence[str], start_revision: int, *, idle_s: float,
              strict: bool = True) -> Iterator[WatchBatch]:
        """See :meth:`KVBackend.watch`: one batch per watch response (:meth:`_watch_batches`)."""
        for revision, events in self._watch_batches(prefixes, start_revision, idle_s, strict=strict):
            yield WatchBatch(revision, tuple(Event("delete" if deleted else "put", kv) for deleted, kv in events))

    def close(self) -> None:
        """Close every HTTP session; later calls raise :class:`StoreUnavailable`. Idempotent."""
        with self._lock:
            self._closed = True
            sessions, self._sessions = list(self._sessions), weakref.WeakSet()
        for s in sessions:
            with contextlib.suppress(Exception):
                s.close()

    def stats(self) -> dict[str, int]:
        """Counters since creation: HTTP ``requests`` sent, ``retries`` after transient errors."""
        with self._lock:
            return dict(self._stats)

    def healthy(self, timeout_s: float = 2.0) -> bool:
        """True when some endpoint answers a linearizable read (one try per endpoint, each
        bounded by ``timeout_s`` and the configured timeouts; no backoff)."""
        if self._closed:
            return False
        payload = {"key": _b64(self.settings.prefix), "count_only": True}
        t = self.settings.timeouts
        for _ in self.endpoints:
            endpoint = self.endpoints[self._preferred % len(self.endpoints)]
            try:
                for _renewed in (False, True):
                    conn = self._conn(endpoint)
                    client = conn.client
                    resp = client.session.post(
                        client.get_url("/kv/range"),
                        json=payload,
                        timeout=(min(t.connect_s, timeout_s), min(t.request_s, timeout_s)),
                    )
                    if resp.status_code == 200:
                        return True
                    if resp.status_code != 401 or _renewed:
                        break
                    self._authenticate(endpoint, client, conn.token_gen)
            except (_Transient, StoreUnavailable, requests.RequestException):
                pass
            with self._lock:
                self._preferred += 1
        return False

    # -- watch streams ----------------------------------------------------------------------

    def _watch_batches(self, prefixes: Sequence[str], start: int, timeout_s: float, *,
                       strict: bool) -> Iterator[tuple[int, list[tuple[bool, KV]]]]:
        """``(revision, [(deleted, kv), ...])`` per watch response with events under any of
        ``prefixes`` (one etcd watch each, on one stream), from ``start``, until ``timeout_s``
        without one. A compacted start revision raises
        :class:`HistoryCompacted` when ``strict``, else the watch goes on from the oldest kept.

        When ``strict``, each (re)opened stream also checks etcd's answer header: a cluster ID
        other than the one this store saw first, or a current revision below what was delivered,
        means the store was replaced or restored from a backup (etcd would otherwise just wait
        for the "future" revision): :class:`HistoryCompacted` too, so the follower lists again."""
        creates = [{"key": _b64(p), "range_end": _range_end(p)} for p in prefixes]
        starts = [start] * len(creates)  # per prefix: the revision to (re)open its watch from
        what = ", ".join(prefixes)
        connect_s = self.settings.timeouts.connect_s
        failures = 0
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            endpoint = self.endpoints[self._preferred % len(self.endpoints)]
            session = self._new_session()
            broken: str | None = None
            try:
                conn = self._conn(endpoint)
                client = conn.client
                if "Authorization" in client.session.headers:
                    session.headers["Authorization"] = client.session.headers["Authorization"]
                resp = session.post(
                    client.get_url("/watch"),
                    data="\n".join(json.dumps({"create_request": {**c, "start_revision": s}})
                                   for c, s in zip(creates, starts)),
                    headers={"Content-Type": "application/json"},
                    stream=True,
                    timeout=(connect_s, left),
                )
                if resp.status_code == 401 and self.settings.auth.username is not None:
                    self._authenticate(endpoint, client, conn.token_gen)  # expired token: renew, reopen
                    raise _Transient(endpoint, self._message(resp.text))
                if resp.status_code != 200:
                    raise StoreUnavailable(f"etcd at {endpoint} refused a watch: {self._message(resp.text)}")
                buf = b""
                ids: dict[int, int] = {}  # etcd's watch ID -> prefix index (created in request order)
                for chunk in resp.iter_content(chunk_size=None):
                    buf += chunk
                    while b"\n" in buf:
                        line, buf = buf.split(b"\n", 1)
                        if not line.strip():
                            continue
                        msg = json.loads(line)
                        if "error" in msg:  # the gateway lost etcd (e.g. it is shutting down)
                            raise _Transient(endpoint, f"watch failed: {self._message(json.dumps(msg['error']))}")
                        result = msg.get("result", {})
                        k = ids.get(int(result.get("watch_id", 0)), 0)  # proto3 JSON omits a zero ID
                        if result.get("created"):
                            k = ids[int(result.get("watch_id", 0))] = len(ids)
                        start = starts[k]
                        if strict and result.get("created"):
                            header = result.get("header", {})
                            seen, self._cluster_id = self._cluster_id, header.get("cluster_id") or self._cluster_id
                            if (seen and self._cluster_id != seen) or int(header.get("revision", start)) < start - 1:
                                raise HistoryCompacted(
                                    f"etcd at {endpoint} was replaced or restored (cluster {header.get('cluster_id')}, "
                                    f"revision {header.get('revision')}; this follower had reached {start - 1})")
                        if result.get("canceled"):
                            compacted = int(result.get("compact_revision", 0))
                            if strict and compacted:
                                raise HistoryCompacted(f"etcd at {endpoint}: revision {start} is compacted "
                                                       f"(oldest kept {compacted})")
                            starts[k] = max(start, compacted)
                            raise _Transient(endpoint, f"watch canceled: {result.get('cancel_reason', '')}")
                        events = [(ev.get("type") == "DELETE", _kv(ev["kv"])) for ev in result.get("events", [])]
                        if events:
                            starts[k] = events[-1][1].mod_revision + 1
                            failures = 0
                            yield starts[k] - 1, events
                            deadline = time.monotonic() + timeout_s
                broken = "stream ended"
            except requests.ConnectionError as exc:
                if exc.args and isinstance(exc.args[0], urllib3.exceptions.ReadTimeoutError):
                    if deadline - time.monotonic() <= 0.05:
                        return  # idle for timeout_s: done
                    broken = "read timeout"  # the idle timer was reset by an event: wait the rest
                else:
                    broken = f"{type(exc).__name__}: {exc}"
            except (requests.RequestException, _Transient, ValueError, KeyError) as exc:
                broken = f"{type(exc).__name__}: {exc}"
            finally:
                session.close()
                with self._lock:
                    self._sessions.discard(session)
            if broken in ("read timeout",):
                continue
            failures += 1
            if failures >= self.settings.retry.attempts:
                raise StoreUnavailable(f"etcd at {self._where()}: watch of {what} broke: {broken}")
            with self._lock:
                self._preferred += 1
            time.sleep(min(self.settings.retry.max_backoff_s, self.settings.retry.initial_backoff_s * 2**failures))
