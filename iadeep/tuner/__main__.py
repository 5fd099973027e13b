"""``python -m iadeep.tuner serve ...`` (the same as ``iadeep tuner serve``)."""

from iadeep.tuner._cli import app

app(prog_name="iadeep tuner")
