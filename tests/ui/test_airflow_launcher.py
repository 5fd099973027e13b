"""``make airflow`` (``python -m iadeep.orchestration``) stops the whole Airflow stack on SIGTERM,
as it does on Ctrl-C. Airflow runs in its own session, so that the launcher's stop reaches all of
it: no Airflow process is left listening."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from iadeep.testing import free_port, wait_for

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(900)]


def _processes_in(home: Path) -> list[int]:
    """Processes whose working folder is ``home`` (Airflow runs there) or below."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cwd = os.readlink(entry / "cwd")
            except OSError:
                continue
            if cwd == str(home) or cwd.startswith(str(home) + "/"):
                found.append(int(entry.name))
    return found


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def test_sigterm_to_the_launcher_stops_all_of_airflow(tmp_path) -> None:
    """Also: Airflow runs in its home, but relative outputs stay where the launcher was started
    (they landed in ``.airflow/`` before): its processes get that folder as ``IADEEP_RUNS_DIR``."""
    pytest.importorskip("airflow")
    home = (tmp_path / "home").resolve()
    here = (tmp_path / "checkout").resolve()
    here.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("IADEEP_RUNS_DIR", "IADEEP_REGRESSION_DIR")}
    env.update({"AIRFLOW_HOME": str(home), "IADEEP_AIRFLOW_PORT": str(free_port()),
                "IADEEP_CACHE_DIR": str(tmp_path / "cache")})
    out = tmp_path / "launcher.out"
    with out.open("wb") as fh:
        launcher = subprocess.Popen([sys.executable, "-m", "iadeep.orchestration"], env=env, stdout=fh, cwd=here,
                                    stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: out.read_text(errors="replace"), lambda t: "Airflow UI:" in t or launcher.poll() is not None,
                 timeout=600, what="airflow standalone healthy")
        assert launcher.poll() is None, out.read_text(errors="replace")[-3000:]
        assert _processes_in(home), "airflow should be running in its home"
        for pid in _processes_in(home):
            seen = _environ(pid)
            if seen:
                assert seen.get("IADEEP_RUNS_DIR") == str(here), (pid, seen.get("IADEEP_RUNS_DIR"))
                assert seen.get("IADEEP_REGRESSION_DIR") == str(here / "regression")
        launcher.send_signal(signal.SIGTERM)
        assert launcher.wait(timeout=60) == 0
        deadline = time.monotonic() + 30
        while _processes_in(home) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _processes_in(home) == [], "airflow processes left after SIGTERM to the launcher"
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
        for pid in _processes_in(home):
            try:
                os.killpg(os.getpgid(pid), signal.SIGKILL)
            except OSError:
                pass
