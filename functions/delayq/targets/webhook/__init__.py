"""``https://...`` (and, where a topic allows it, ``http://...``) targets: each attempt a POST of the
job as JSON (``delivery``), signed when a key is set (``signing``), to an address the guard lets
through (``guard``), within the attempt's deadline (``deadline``). What a receiver sees and what each
answer means: docs/topics.md's "webhooks". A receiver checks a signature with ``verify_signature``."""

from .delivery import USER_AGENT, Webhook, retry_after_s, webhook_target
from .endpoint import Endpoint
from .errors import WebhookError, WebhookRefused, WebhookRetryAfter
from .guard import GLOBAL_UNICAST, REFUSED, Address, refusal, resolve
from .signing import SIGNATURE_HEADER, sign, signing_key, verify_signature

__all__ = [
    "GLOBAL_UNICAST",
    "REFUSED",
    "SIGNATURE_HEADER",
    "USER_AGENT",
    "Address",
    "Endpoint",
    "Webhook",
    "WebhookError",
    "WebhookRefused",
    "WebhookRetryAfter",
    "refusal",
    "resolve",
    "retry_after_s",
    "sign",
    "signing_key",
    "verify_signature",
    "webhook_target",
]
