"""Loading: the write strategy, chosen once, the target's schema, the ledger and the run lock."""
