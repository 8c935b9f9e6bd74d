"""`python -m ckptcli` runs the ckpt command."""

from ckptcli.cli import entry

entry()
