"""Reading: the source snapshot and its schema, the kept snapshot and the pages that changed, transcripts."""
