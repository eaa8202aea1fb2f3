"""Keeping an index in step with its vault: the plan and the syncer, the embedding loop, the watcher and its debouncer."""
