"""One module per verb; each registers itself on ckptcli.cli.app.app when imported."""
