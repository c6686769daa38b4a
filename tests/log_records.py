"""Catching what named loggers emit, where pytest's caplog cannot: vLLM's loggers do not
propagate to the root logger that caplog listens on."""

from __future__ import annotations

import contextlib
import logging


@contextlib.contextmanager
def records_of(*logger_names: str, level: int = logging.WARNING):
    """A list that fills with the records of `level` and above that these loggers handle
    inside the block."""
    records: list[logging.LogRecord] = []
    catch = logging.Handler(level=level)
    catch.emit = records.append
    loggers = [logging.getLogger(name) for name in logger_names]
    for lg in loggers:
        lg.addHandler(catch)
    try:
        yield records
    finally:
        for lg in loggers:
            lg.removeHandler(catch)
