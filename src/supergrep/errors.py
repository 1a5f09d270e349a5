"""The SupergrepError hierarchy.

Library code raises these with a message that says what to do next; the CLI turns them into
a one-line error on stderr and exit code 2. Nothing else in the package prints or exits.
"""

from __future__ import annotations


class SupergrepError(Exception):
    """Base class: a problem the user can fix, with a message saying how."""

    exit_code = 2


class UsageError(SupergrepError):
    """Bad arguments or option values."""


class ConfigError(SupergrepError):
    """A malformed or inconsistent config file (message names the file and line)."""


class InputError(SupergrepError):
    """Malformed input data, e.g. a JSONL line (message names the file and line number)."""


class ModelError(SupergrepError):
    """A model directory that cannot be loaded, or an unsupported layout."""


class IndexMissingError(SupergrepError):
    """The project has no index yet and indexing was not allowed."""


class ModelMismatchError(SupergrepError):
    """An index built with one model was opened with another."""


class IndexCorruptError(SupergrepError):
    """An index whose files cannot be read; `supergrep index --force` rebuilds it."""


class IndexBusyError(SupergrepError):
    """Another process is writing the same index."""


class TrainingError(SupergrepError):
    """A training run that cannot go on (out of memory at mini-batch 1, a non-finite loss, a
    checkpoint that does not fit the model, ...)."""


class DaemonError(SupergrepError):
    """The daemon cannot start, or does not answer (the message names its log file)."""
