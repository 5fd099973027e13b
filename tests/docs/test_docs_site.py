"""The documentation site builds strict, its references are the code's, and a broken page fails it."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import typer.main
import yaml

from iadeep.cli import app
from iadeep.extender import ExtenderSettings
from iadeep.state import StateSettings


def _text(html: Path) -> str:
    return re.sub(r"<[^>]+>", "", html.read_text())


def test_the_site_builds_strict_with_references_generated_from_the_code(repo_root, build_site, tmp_path):
    done = build_site(repo_root / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, done.stdout + done.stderr

    config = _text(tmp_path / "site" / "reference" / "configuration" / "index.html")
    for name in ExtenderSettings.model_fields:
        if name not in ("kube", "cache", "defaults", "etcd"):
            assert f"IADEEP_EXTENDER_{name.upper()}" in config, name
    for group, model in (("CACHE", "cache"), ("KUBE", "kube")):
        for name in ExtenderSettings.model_fields[model].annotation.model_fields:
            assert f"IADEEP_EXTENDER_{group}__{name.upper()}" in config
    for name in ("RETRY__DEADLINE_S", "TLS__CA_FILE", "MAX_TXN_OPS", "ENDPOINTS"):
        assert f"IADEEP_ETCD_{name}" in config
    assert str(StateSettings.model_fields["max_txn_ops"].default) in config
    assert "IADEEP_DATASET_MIRROR" in config

    cli = _text(tmp_path / "site" / "reference" / "cli" / "index.html")
    root = typer.main.get_command(app)
    ctx = root.context_class(root, info_name="iadeep")
    experiment = root.get_command(ctx, "experiment")
    sub = experiment.context_class(experiment, info_name="experiment", parent=ctx)
    for name in experiment.list_commands(sub):
        assert f"iadeep experiment {name}" in cli
    run = experiment.get_command(sub, "run")
    for param in run.params:
        for opt in param.opts:
            if opt.startswith("--"):
                assert opt in cli, opt


def test_a_dead_link_a_missing_anchor_or_a_renamed_option_fails_the_build(repo_root, build_site, tmp_path):
    """The strict checks, proven: each planted defect is named and the build fails."""
    shutil.copytree(repo_root / "docs", tmp_path / "docs")
    config = yaml.safe_load((repo_root / "mkdocs.yml").read_text())
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))
    page = tmp_path / "docs" / "getting-started.md"
    page.write_text(page.read_text() + "\n\nSee [the missing page](no-such-page.md), "
                    "[a missing anchor](reference/cli.md#iadeep-experiment-fly), "
                    "`iadeep experiment run --no-such-option 1`, `iadeep experiment fly` and "
                    "`IADEEP_EXTENDER_NO_SUCH_SETTING`.\n")

    done = build_site(tmp_path / "mkdocs.yml", tmp_path / "site")
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert "no-such-page.md" in out
    assert "iadeep-experiment-fly" in out
    assert "--no-such-option" in out
    assert "`iadeep experiment fly` is not a command" in out
    assert "IADEEP_EXTENDER_NO_SUCH_SETTING" in out
