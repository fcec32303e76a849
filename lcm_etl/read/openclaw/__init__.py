"""Where OpenClaw keeps its state and transcripts: the state folder, the session store, its hidden history, sessions folders."""
