"""Retrieval quality: the hit rule, metrics, query files and the eval runner."""
