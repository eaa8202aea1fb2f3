"""The shell's face: the `memsync` commands (commands, serving), the options they share and the
boundary that turns memsync's errors into one-line messages and exit codes (common)."""
