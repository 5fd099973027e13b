"""``python -m iadeep.deviceplugin serve ...`` (the same as ``iadeep deviceplugin serve``: a configuration error is one line, exit code 2)."""

import sys

from iadeep._climain import run_cli
from iadeep.deviceplugin._cli import app

sys.exit(run_cli(app, prog_name="iadeep deviceplugin"))
