"""Search: the query's options, its legs, calibration, fusion, diversity and snippets, and the Chinese-English glossary."""
