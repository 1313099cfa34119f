"""What a webhook attempt can fail with: worth retrying, retried no sooner than asked, or never."""

from __future__ import annotations

from delayq.core.errors import PermanentFailure, RetryAfter


class WebhookError(Exception):
    """A failed attempt worth retrying: a 408, 425, 429 or 5xx answer, a timeout, or a DNS, TCP or
    TLS failure."""


class WebhookRetryAfter(WebhookError, RetryAfter):
    """A 429 or 503 answer with ``Retry-After``: retried, no sooner than it asks (at most a day later)."""


class WebhookRefused(PermanentFailure):
    """An attempt that retrying cannot fix: a 3xx or other 4xx answer, or a URL or address the
    topic's config does not allow. The job goes dead at once."""
