"""The fixtures are source files to chunk, not modules to import or collect doctests from."""

collect_ignore_glob = ["fixtures/*"]
