"""Framework backends. Framework tensors never leave this package: callers pass and receive
NumPy arrays. Backends are imported lazily so `supergrep search` runs with only one framework."""

from supergrep.backends.base import Backend, available_backends, load_backend

__all__ = ["Backend", "available_backends", "load_backend"]
