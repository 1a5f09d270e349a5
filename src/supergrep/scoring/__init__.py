"""Pure scoring functions (NumPy only): MaxSim, code-aware lexical terms, rank fusion."""
