"""Text -> L2-normalised token vectors (one per token), for queries and documents."""

from supergrep.encoder.encoder import Encoder
from supergrep.encoder.spec import EncoderSettings, ModelSpec, resolve_model

__all__ = ["Encoder", "EncoderSettings", "ModelSpec", "resolve_model"]
