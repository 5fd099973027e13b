"""``python -m iadeep.extender serve ...`` (the same as ``iadeep extender serve``)."""

from iadeep.extender._cli import app

app(prog_name="iadeep extender")
