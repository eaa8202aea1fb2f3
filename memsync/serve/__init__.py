"""`memsync serve`: the index over HTTP, behind tokens; and its tokens."""
