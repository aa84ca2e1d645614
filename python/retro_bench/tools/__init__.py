"""Stand-alone tools over results and traces: the cache-locality table, two results directories compared,
synthetic traces checked identical, the code-size count (docs/design.md)."""
