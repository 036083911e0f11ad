"""The ``onnxtrain`` logger: what onnxtrain did (models loaded, artifacts generated,
checkpoints saved), at INFO; DEBUG adds detail. Silent by default, as a library should be.

Turn it on with ``onnxtrain.set_log_level("INFO")``, the environment variable
``ONNXTRAIN_LOG_LEVEL=INFO`` (read at import) or the CLI's ``--log-level INFO``. Either adds
one stderr handler to the logger unless it has one; an application that configures
``logging`` itself can instead just set the level of ``logging.getLogger("onnxtrain")``.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from typing import Union

LOGGER_NAME = "onnxtrain"
ENVIRONMENT_VARIABLE = "ONNXTRAIN_LOG_LEVEL"
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

logger = logging.getLogger(LOGGER_NAME)
logger.addHandler(logging.NullHandler())
_handler: logging.Handler | None = None


def _parse_level(level: Union[int, str]) -> int:
    if isinstance(level, bool):
        raise TypeError("log level must be a level name or a logging level number, not a bool")
    if isinstance(level, int):
        return level
    if isinstance(level, str) and level.strip().upper() in LEVELS:
        return int(getattr(logging, level.strip().upper()))
    if isinstance(level, str) and level.strip().isdigit():
        return int(level.strip())
    raise ValueError(f"unknown log level {level!r}; expected one of {', '.join(LEVELS)} or a number")


def set_log_level(level: Union[int, str]) -> None:
    """Shows onnxtrain's messages of ``level`` and above ("DEBUG", "INFO", "WARNING", "ERROR",
    "CRITICAL", or a ``logging`` number) on stderr.

    Raises:
        ValueError: an unknown level name.
    """
    global _handler
    logger.setLevel(_parse_level(level))
    if _handler is None and not any(not isinstance(h, logging.NullHandler) for h in logger.handlers):
        _handler = logging.StreamHandler(sys.stderr)
        _handler.setFormatter(logging.Formatter("onnxtrain %(levelname)s: %(message)s"))
        logger.addHandler(_handler)
        logger.propagate = False  # the message once, even when the root logger prints too


def get_log_level() -> int:
    """The effective level of the ``onnxtrain`` logger (a ``logging`` number)."""
    return logger.getEffectiveLevel()


def _configure_from_environment() -> None:
    value = os.environ.get(ENVIRONMENT_VARIABLE, "").strip()
    if not value:
        return
    try:
        set_log_level(value)
    except ValueError as error:
        warnings.warn(f"{ENVIRONMENT_VARIABLE}: {error}; the onnxtrain logger keeps its level", stacklevel=2)


_configure_from_environment()
