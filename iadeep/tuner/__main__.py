"""``python -m iadeep.tuner serve ...`` (the same as ``iadeep tuner serve``: a configuration error is one line, exit code 2)."""

import sys

from iadeep._climain import run_cli
from iadeep.tuner._cli import app

sys.exit(run_cli(app, prog_name="iadeep tuner"))
