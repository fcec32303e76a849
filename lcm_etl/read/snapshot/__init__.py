"""The kept snapshot: the previous run's copy, the pages that changed and who owns their rows, a run's private folder."""
