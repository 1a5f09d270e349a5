"""The daemon's wire protocol (standard library only). Documented in docs/daemon.md.

A unix stream socket carrying UTF-8 newline-delimited JSON: one object per line.

- Request: ``{"v": 1, "op": "search", "id": <any, optional>, ...op fields}``. A connection may
  carry several requests, one after the other; each is answered before the next is read.
- Answer: zero or more notices ``{"v": 1, "id": ..., "notice": "a line for stderr"}``, then
  exactly one response ``{"v": 1, "id": ..., "ok": true, ...}`` or
  ``{"v": 1, "id": ..., "ok": false, "error": {"type", "message", "exit_code"}, "fallback": bool}``.
  ``fallback: true`` means "do it yourself" (an unsupported version or an argument the daemon
  leaves to the CLI to reject); anything else is the error the direct path would report.
- Ops: ``ping``, ``status``, ``search``, ``index``, ``add``, ``remove``, ``list``, ``stop``.
"""

from __future__ import annotations

PROTOCOL_VERSION = 1
MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # one message (a search answer with -n 10000 -C 10000 fits)

# The client side decodes with the C scanner behind ``json`` and encodes requests with its
# string quoting, without importing ``json`` itself: that module pulls in ``re`` and ``enum``,
# a noticeable share of a 30 ms budget. Other Pythons fall back to ``json``.
try:
    import _json

    class _ScanContext:
        strict = True
        object_hook = None
        object_pairs_hook = None
        parse_float = float
        parse_int = int
        parse_constant = float  # NaN, Infinity

    _scan = _json.make_scanner(_ScanContext())
    _quote = _json.encode_basestring_ascii
except (ImportError, AttributeError):  # pragma: no cover - CPython always has _json
    _scan = None
    _quote = None


class ProtocolError(Exception):
    """A malformed or oversized message."""


def encode(message: dict) -> bytes:
    """One message as a line of compact UTF-8 JSON (the daemon's side: ``json``'s C encoder)."""
    import json

    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


def _dumps(value) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_dumps(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{_quote(str(k))}:{_dumps(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot encode {type(value).__name__}")


def encode_request(message: dict) -> bytes:
    """A client's request line, without importing ``json`` (same bytes ``decode`` reads)."""
    if _quote is None:  # pragma: no cover
        return encode(message)
    return _dumps(message).encode("ascii") + b"\n"


def decode(line: bytes) -> dict:
    """One message line -> dict (``ProtocolError`` when it is not a JSON object)."""
    try:
        text = line.decode("utf-8").strip()
        if _scan is not None:
            message, end = _scan(text, 0)
            if end != len(text):
                raise ValueError(f"extra data at column {end}")
        else:  # pragma: no cover
            import json

            message = json.loads(text)
    except (ValueError, UnicodeDecodeError, StopIteration) as exc:
        raise ProtocolError(f"not a JSON line: {exc!r}") from None
    if not isinstance(message, dict):
        raise ProtocolError("a message must be a JSON object")
    return message


class LineReader:
    """Newline-delimited messages from a socket (``recv``-based; no file object needed)."""

    def __init__(self, sock, limit: int = MAX_MESSAGE_BYTES):
        self.sock = sock
        self.limit = limit
        self.buf = b""

    def read(self) -> dict | None:
        """The next message, or None at end of stream."""
        while True:
            nl = self.buf.find(b"\n")
            if nl >= 0:
                line, self.buf = self.buf[:nl], self.buf[nl + 1 :]
                if line.strip():
                    return decode(line)
                continue
            if len(self.buf) > self.limit:
                raise ProtocolError(f"message longer than {self.limit} bytes")
            data = self.sock.recv(1 << 20)
            if not data:
                if self.buf.strip():
                    raise ProtocolError("connection closed mid-message")
                return None
            self.buf += data


def error(kind: str, message: str, exit_code: int = 2, fallback: bool = False) -> dict:
    """A failed response's fields."""
    return {"ok": False, "error": {"type": kind, "message": message, "exit_code": exit_code}, "fallback": fallback}
