"""`python -m ckptcli` runs the ckpt command."""

from ckptcli.cli.app import entry

entry()
