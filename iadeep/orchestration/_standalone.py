"""``airflow standalone`` with this project's DAGs, on loopback (``make airflow``, the UI test).

:class:`Standalone` starts Airflow 3's all-in-one development server (api-server with the UI,
scheduler, dag-processor, triggerer; SQLite and the LocalExecutor) in its own process group with
``AIRFLOW_HOME``, the ``dags/`` folder and ``127.0.0.1:<port>``, waits until
``/api/v2/monitor/health`` answers, and reads the password the simple auth manager generated for
``admin`` (``simple_auth_manager_passwords.json.generated``). :meth:`Standalone.stop` ends the
whole group.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["Standalone", "main"]

REPO = Path(__file__).resolve().parents[2]


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class Standalone:
    """One ``airflow standalone`` (see the module docstring).

    Args:
        home: ``AIRFLOW_HOME`` (database, logs, generated password); created.
        port: the API server's port on 127.0.0.1 (0: 8080 when free, else any free port).
        dags_folder: the DAGs (default: this checkout's ``dags/``).
        env: more environment for Airflow (``AIRFLOW_CONN_*``, ``AIRFLOW_VAR_*``, ``IADEEP_*``).
    """

    def __init__(self, home: str | Path, port: int = 0, dags_folder: str | Path | None = None,
                 env: dict[str, str] | None = None):
        self.home = Path(home).resolve()
        if not port:
            from iadeep._host import free_port

            port = 8080 if _port_free(8080) else free_port()
        self.port = port
        self.dags_folder = Path(dags_folder or REPO / "dags").resolve()
        self.env = dict(env or {})
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.home / "standalone.log"

    def start(self, timeout_s: float = 600.0) -> Standalone:
        """Start and wait until healthy.

        Raises:
            RuntimeError: Airflow exited or was not healthy within ``timeout_s`` (with its log's tail).
        """
        import httpx

        from iadeep._host import free_port

        self.home.mkdir(parents=True, exist_ok=True)
        bindir = str(Path(sys.executable).parent)
        env = {**os.environ, "AIRFLOW_HOME": str(self.home), "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
               "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__API__HOST": "127.0.0.1",
               "AIRFLOW__API__PORT": str(self.port), "AIRFLOW__API__BASE_URL": self.url,
               "AIRFLOW__CORE__PARALLELISM": "4",
               # a loaded machine (SQLite, several processes) can stall the API server for minutes:
               # tasks wait for it rather than fail their first call
               "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "300",
               "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
               # the scheduler's and triggerer's log servers (their host is not configurable in
               # Airflow 3.3: they listen on all interfaces); free ports so that several run side by side
               "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
               "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
               "PATH": f"{bindir}:{os.environ.get('PATH', '')}", **self.env}
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen([str(Path(bindir) / "airflow"), "standalone"], env=env, stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True, cwd=str(self.home))
        log.close()
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"airflow standalone exited with {self.proc.returncode}:\n{self._tail()}")
            try:
                r = httpx.get(f"{self.url}/api/v2/monitor/health", timeout=5)
                if r.status_code == 200 and self.password_file.is_file():
                    return self
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"airflow standalone not healthy after {timeout_s:.0f}s:\n{self._tail()}")
            time.sleep(1.0)

    @property
    def password_file(self) -> Path:
        return self.home / "simple_auth_manager_passwords.json.generated"

    @property
    def password(self) -> str:
        """The generated password of user ``admin``."""
        return json.loads(self.password_file.read_text())["admin"]

    def token(self) -> str:
        """A JWT for the REST API (``POST /auth/token``)."""
        import httpx

        r = httpx.post(f"{self.url}/auth/token", json={"username": "admin", "password": self.password}, timeout=300)
        r.raise_for_status()
        return r.json()["access_token"]

    def api(self, method: str, path: str, **kwargs: Any) -> Any:
        """One REST call (``/api/v2`` + ``path``) with a fresh token; returns the JSON body."""
        import httpx

        r = httpx.request(method, f"{self.url}/api/v2{path}", headers={"Authorization": f"Bearer {self.token()}"},
                          timeout=300, **kwargs)
        r.raise_for_status()
        return r.json() if r.content else None

    def _tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def stop(self) -> None:
        """Terminate the whole process group (then kill what is left after 20 s)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        pgid = os.getpgid(self.proc.pid)
        os.killpg(pgid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(pgid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        try:  # children that outlived the parent
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def __enter__(self) -> Standalone:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    """``make airflow``: start, print the URL and the admin password, run until Ctrl-C.

    Environment: ``AIRFLOW_HOME`` (default ``./.airflow``), ``IADEEP_AIRFLOW_PORT`` (default 8080,
    or a free port when 8080 is taken). Airflow runs in ``AIRFLOW_HOME``; relative ``out`` folders
    and the regression folder stay where the launcher was started, as with the CLI
    (``IADEEP_RUNS_DIR`` and ``IADEEP_REGRESSION_DIR`` default to ``.`` and ``./regression`` there).
    """
    home = Path(os.environ.get("AIRFLOW_HOME") or ".airflow")
    here = Path.cwd()
    server = Standalone(home, int(os.environ.get("IADEEP_AIRFLOW_PORT") or 0),
                        env={"IADEEP_RUNS_DIR": os.environ.get("IADEEP_RUNS_DIR") or str(here),
                             "IADEEP_REGRESSION_DIR": os.environ.get("IADEEP_REGRESSION_DIR") or str(here / "regression")})

    def _interrupt(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    # Airflow runs in its own session (so that stop() ends all of it): SIGTERM or SIGHUP to this
    # launcher must stop it as Ctrl-C does, or the whole stack stays up with its ports
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)
    print(f"starting airflow standalone in {server.home} (log: {server.log_path}) ...", flush=True)
    try:
        server.start()
        print(f"Airflow UI: {server.url}/\n  user: admin\n  password: {server.password}\n"
              f"Trigger iadeep_experiment from the UI (DAGs > iadeep_experiment > Trigger). Ctrl-C stops it.", flush=True)
        while server.proc is not None and server.proc.poll() is None:
            time.sleep(1.0)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0
