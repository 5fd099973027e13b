"""``python -m iadeep.coordinator serve ...`` (the same as ``iadeep coordinator serve``: a configuration error is one line, exit code 2)."""

import sys

from iadeep._climain import run_cli
from iadeep.coordinator._cli import app

sys.exit(run_cli(app, prog_name="iadeep coordinator"))
