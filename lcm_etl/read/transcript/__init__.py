"""A transcript parsed as lossless-claw reads it: the active path, content blocks, token count, identity hash."""
