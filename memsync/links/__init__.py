"""Links between notes as Obsidian users write them: parsed from a note's text, resolved to the
note Obsidian would open, and the sections a link can point at. Pure: the store keeps them."""
