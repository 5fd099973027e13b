"""The quickstart's commands, read from its page, run and write what the page says."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from iadeep.experiment import DEFAULT_POLICIES

QUICKSTART = re.compile(r'^```sh title="Quickstart"\n(.*?)^```', re.M | re.S)


def quickstart_commands(page: Path) -> list[list[str]]:
    """The commands of the page's ``sh title="Quickstart"`` block, comments and blanks left out."""
    blocks = QUICKSTART.findall(page.read_text())
    assert len(blocks) == 1, f"{page}: expected one Quickstart block, found {len(blocks)}"
    commands = []
    for line in blocks[0].splitlines():
        words = shlex.split(line, comments=True)
        if words:
            assert words[0] == "iadeep", f"{page}: the quickstart runs iadeep commands only: {line}"
            commands.append(words)
    return commands


def test_the_quickstart_runs_as_written(repo_root, dataset_cache, tmp_path):
    commands = quickstart_commands(repo_root / "docs" / "getting-started.md")
    assert any(c[1:3] == ["experiment", "run"] for c in commands)
    env = dict(os.environ, IADEEP_CACHE_DIR=str(dataset_cache),
               PYTHONPATH=os.pathsep.join([str(repo_root), os.environ.get("PYTHONPATH", "")]))
    for words in commands:
        done = subprocess.run([sys.executable, "-m", "iadeep.cli", *words[1:]], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{shlex.join(words)}:\n{done.stdout}\n{done.stderr}"
        if words[1:3] == ["experiment", "run"]:
            out = tmp_path / words[words.index("--out") + 1]
            policies = (words[words.index("--policies") + 1].split(",") if "--policies" in words
                        else list(DEFAULT_POLICIES))
            summary = json.loads((out / "summary.json").read_text())
            assert list(summary["policies"]) == policies
            for name in ("report.md", "jct_cdf.png", *(f"jobs-{p}.csv" for p in policies)):
                assert (out / name).is_file(), name
