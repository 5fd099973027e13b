"""``iadeep extender serve`` refuses a configuration it cannot use with one line, exit code 2."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from extender_support import closed_port_kubeconfig
from pydantic import ValidationError

from iadeep.extender import ExtenderSettings
from iadeep.policy import MAX_COLOCATION_LIMIT, policy_names


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


def _serve(tmp_path, throughputs_path, etcd_settings, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """``iadeep extender serve`` with a usable configuration (a kubeconfig naming a closed loopback
    port, which loading never calls) but for ``args`` and ``env``."""
    kubeconfig = closed_port_kubeconfig(tmp_path / "kubeconfig")
    full = {**os.environ, "HOME": str(tmp_path), "IADEEP_EXTENDER_THROUGHPUTS_FILE": str(throughputs_path),
            "IADEEP_ETCD_ENDPOINTS": ",".join(etcd_settings.endpoints), "IADEEP_ETCD_LOCAL__DIR": str(tmp_path / "etcd"),
            "IADEEP_EXTENDER_PORT": "0", "IADEEP_EXTENDER_KUBE__KUBECONFIG": str(kubeconfig), **env}
    full.pop("KUBECONFIG", None)
    return subprocess.run([sys.executable, "-m", "iadeep.extender", "serve", *args], env=full, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize(("args", "env"), [
    (["--policy", "bogus"], {}),
    ([], {"IADEEP_EXTENDER_POLICY": "bogus"}),
])
def test_unknown_policy_is_one_line_naming_the_option_and_the_policies(tmp_path, throughputs_path, etcd_settings, args,
                                                                       env, workers):
    done = _serve(tmp_path, throughputs_path, etcd_settings, args, {**env, "IADEEP_EXTENDER_WORKERS": workers})
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("iadeep extender: "), done.stderr
    assert "--policy / IADEEP_EXTENDER_POLICY" in lines[0] and "unknown policy 'bogus'" in lines[0]
    assert f"(one of: {', '.join(policy_names())})" in lines[0]


def test_settings_refuse_an_unknown_policy_and_a_limit_above_a_gpus():
    with pytest.raises(ValidationError, match=r"policy\n.*unknown policy 'bogus' \(one of: iadeep, "):
        ExtenderSettings(policy="bogus")
    for name in policy_names():
        assert ExtenderSettings(policy=name).policy == name
    assert ExtenderSettings(colocation_limit=MAX_COLOCATION_LIMIT).colocation_limit == MAX_COLOCATION_LIMIT
    with pytest.raises(ValidationError, match="colocation_limit"):
        ExtenderSettings(colocation_limit=MAX_COLOCATION_LIMIT + 1)


@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize(("text", "reason"), [
    ("apiVersion: [\n", "while parsing a flow node"),  # not YAML
    ("clusters: 5\n", "not a kubeconfig"),  # YAML of another shape
])
def test_a_kubeconfig_that_is_not_one_is_one_line(tmp_path, throughputs_path, etcd_settings, text, reason, workers):
    bad = tmp_path / "badkube"
    bad.write_text(text)
    done = _serve(tmp_path, throughputs_path, etcd_settings, ["--kubeconfig", str(bad)], {"IADEEP_EXTENDER_WORKERS": workers})
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"iadeep extender: cannot load the Kubernetes configuration (kubeconfig {bad}): {reason}")
    assert lines[0].endswith("set --kubeconfig (IADEEP_EXTENDER_KUBE__KUBECONFIG) or --in-cluster")
