"""Secrets Manager values, read through Powertools Parameters and cached per container.

A Lambda container reads a secret once (it is cached for ``MAX_AGE_S``, longer than containers
live) and again only when told to (``fresh``: Redis refused the password it held). A value is never
logged or quoted: errors name the AWS error's kind, nothing else.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities import parameters

MAX_AGE_S = 24 * 3600  # once per container, in practice: containers rarely live a day


class SecretUnreadable(Exception):
    """A secret could not be read; the text is the kind of the AWS error (``ResourceNotFoundException``)."""


def read(secret_id: str, *, fresh: bool = False, max_age_s: int = MAX_AGE_S) -> Any:
    """The value of the secret ``secret_id`` (a name or an ARN): a string, or bytes for a binary
    secret; from this container's cache (at most ``max_age_s`` old) unless ``fresh``."""
    try:
        return parameters.get_secret(secret_id, max_age=max_age_s, force_fetch=fresh)
    except parameters.GetParameterError as exc:
        raise SecretUnreadable(type(exc.__cause__ or exc.__context__ or exc).__name__) from None


def read_text(secret_id: str, *, fresh: bool = False, max_age_s: int = MAX_AGE_S) -> str:
    """``read``, a binary secret decoded as UTF-8."""
    value = read(secret_id, fresh=fresh, max_age_s=max_age_s)
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)
