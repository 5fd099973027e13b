"""``python -m iadeep.coordinator serve ...`` (the same as ``iadeep coordinator serve``)."""

from iadeep.coordinator._cli import app

app(prog_name="iadeep coordinator")
