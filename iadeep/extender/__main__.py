"""``python -m iadeep.extender serve ...`` (the same as ``iadeep extender serve``)."""

import sys

from iadeep._climain import run_cli
from iadeep.extender._cli import app

sys.exit(run_cli(app, prog_name="iadeep extender"))
