"""``iadeep extender serve`` refuses a configuration it cannot use with one line, exit code 2."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize(("env", "message"), [
    ({"IADEEP_EXTENDER_THROUGHPUTS_FILE": "/nonexistent/simulation_throughputs.json"}, "/nonexistent/simulation_throughputs.json"),
    ({"IADEEP_EXTENDER_THROUGHPUTS_FILE": None}, "no throughputs file"),  # the service never downloads it
    ({"IADEEP_ETCD_ENDPOINTS": ""}, "no etcd endpoint configured"),
    ({"IADEEP_EXTENDER_KUBE__KUBECONFIG": "/nonexistent/kubeconfig"}, "cannot load the Kubernetes configuration"),
])
def test_unusable_configuration_is_one_line(tmp_path, throughputs_path, etcd_settings, env, message, workers):
    full = {**os.environ, "HOME": str(tmp_path), "IADEEP_EXTENDER_THROUGHPUTS_FILE": str(throughputs_path),
            "IADEEP_ETCD_ENDPOINTS": ",".join(etcd_settings.endpoints), "IADEEP_ETCD_LOCAL__DIR": str(tmp_path / "etcd"),
            "IADEEP_EXTENDER_WORKERS": workers, "IADEEP_EXTENDER_PORT": "0", **env}
    full.pop("KUBECONFIG", None)
    full = {k: v for k, v in full.items() if v is not None}
    done = subprocess.run([sys.executable, "-m", "iadeep.extender", "serve"], env=full, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("iadeep extender: ") and message in lines[0]
    assert "Traceback" not in done.stderr
