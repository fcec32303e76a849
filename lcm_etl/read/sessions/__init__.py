"""What reconcile and audit read of `--sessions`: every transcript, each from its record or whole (and why), into the run file."""
