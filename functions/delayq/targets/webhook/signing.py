"""Webhook signatures: each attempt signed afresh, the way Stripe and GitHub sign theirs (docs/topics.md,
"Signatures"), with a key read at each delivery from the settings or Secrets Manager."""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from collections.abc import Callable

from delayq.aws import secrets as aws_secrets
from delayq.core.settings import ENV, Settings

from .errors import WebhookError

SIGNATURE_HEADER = "Delayq-Signature"
SIGNATURE_TOLERANCE_S = 300
SIGNING_KEY_MAX_AGE_S = 300  # a key from DELAYQ_WEBHOOK_SECRET_ID is read again after this long
_TIMESTAMP = re.compile(r"^[0-9]{1,12}$")


def sign(secret: str, body: bytes, timestamp: int) -> str:
    """The ``Delayq-Signature`` header value for ``body`` sent at ``timestamp`` (unix seconds)."""
    return f"t={timestamp},v1={_digest(secret, timestamp, body)}"


def verify_signature(
    secret: str, header: str, body: bytes | str, *, tolerance_s: int = SIGNATURE_TOLERANCE_S, now: float | None = None
) -> bool:
    """Whether ``header`` (a ``Delayq-Signature`` value) signs ``body`` with ``secret``, and its
    timestamp is within ``tolerance_s`` seconds of ``now`` (default: the current time), before or
    after. ``body`` is the raw request body (a ``str`` is taken as its UTF-8 encoding). Several
    ``v1=`` entries are accepted, any one matching. Comparison is in constant time; a malformed
    header is ``False``, never an exception."""
    if not secret or not header:
        return False
    raw = body.encode("utf-8") if isinstance(body, str) else bytes(body)
    timestamp: int | None = None
    candidates: list[str] = []
    for part in header.split(","):
        key, sep, value = part.strip().partition("=")
        value = value.strip()
        if not sep:
            continue
        if key == "t":
            if timestamp is not None or not _TIMESTAMP.fullmatch(value):
                return False
            timestamp = int(value)
        elif key == "v1":
            candidates.append(value.lower())
    if timestamp is None or not candidates:
        return False
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance_s:
        return False
    expected = _digest(secret, timestamp, raw).encode("ascii")
    matches = [hmac.compare_digest(expected, candidate.encode("utf-8")) for candidate in candidates]
    return any(matches)


def _digest(secret: str, timestamp: int, body: bytes) -> str:
    message = f"{timestamp}.".encode("ascii") + body
    return hmac.new(secret.encode("utf-8"), message, hashlib.sha256).hexdigest()


SigningKey = Callable[[], str | None]


def signing_key(settings: Settings) -> SigningKey:
    """The key that signs deliveries, read at each delivery: ``DELAYQ_WEBHOOK_SECRET`` as is, or the
    value of the Secrets Manager secret ``DELAYQ_WEBHOOK_SECRET_ID``, cached per container for
    ``SIGNING_KEY_MAX_AGE_S`` (a rotated key reaches every container within that time: receivers accept
    both keys meanwhile). A key that cannot be read fails the delivery (retried), never sends it unsigned."""
    secret_id, key = settings.webhook_secret_id, settings.webhook_secret
    if secret_id is None:
        return lambda: key

    def read() -> str:
        try:
            return aws_secrets.read_text(secret_id, max_age_s=SIGNING_KEY_MAX_AGE_S)
        except aws_secrets.SecretUnreadable as exc:
            raise WebhookError(f"cannot read the signing key from {ENV.WEBHOOK_SECRET_ID} ({exc})") from None

    return read
