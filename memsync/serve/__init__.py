"""Serving a vault beyond one command: `memsync serve` (the index over HTTP for people, a search
page, and for programs, a JSON API and MCP, behind tokens; and its tokens), and the local
endpoint that lets this user's shell reuse a warm daemon. Modules here are imported directly;
this file imports nothing, so that the shell's client stays light."""
