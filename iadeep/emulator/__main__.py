"""``python -m iadeep.emulator serve ...`` (the same as ``iadeep emulator serve``)."""

from iadeep.emulator._cli import app

app(prog_name="iadeep emulator")
