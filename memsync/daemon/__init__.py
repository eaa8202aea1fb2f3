"""The daemon behind `memsync serve` and `watch`: the runner that holds the watcher and the HTTP
server, and the local endpoint and relay through which this user's shell reuses it. Modules here
are imported directly; this file imports nothing, so that the shell's client stays light."""
