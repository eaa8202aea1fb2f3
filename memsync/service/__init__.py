"""memsync as a background service at login: the unit's text, and the user's service manager."""
