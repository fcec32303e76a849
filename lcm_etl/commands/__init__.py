"""One module per command; cli.py is the thin click layer over them."""
