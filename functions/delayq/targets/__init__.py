"""Delivery targets: where consume hands a due job. A target is a callable ``(job, timeout_s) -> result``
(``target.py`` says what its answers mean); ``resolve_target`` picks one from a topic's config."""

from __future__ import annotations

from delayq.core.errors import ConfigError
from delayq.core.job import Job
from delayq.core.settings import Settings, TopicConfig, is_webhook

from .aws import eventbridge_target, is_queue_url, lambda_target, sns_target, sqs_target
from .payload import payload
from .python import python_target
from .target import Target
from .webhook import webhook_target

PYTHON = "python:"  # a target that is a function of this process: python:module:function


def resolve_target(config: TopicConfig, settings: Settings) -> Target:
    """The target a topic's config names. Raises ``ConfigError`` when it cannot be used."""
    spec = config.target
    if spec.startswith(PYTHON):
        return python_target(spec)
    if spec.startswith("arn:aws:lambda:"):
        return lambda_target(spec)
    if spec.startswith("arn:aws:sqs:") or is_queue_url(spec):
        return sqs_target(spec)
    if spec.startswith("arn:aws:sns:"):
        return sns_target(spec)
    if spec.startswith("arn:aws:events:"):
        return eventbridge_target(spec)
    if is_webhook(spec):
        return webhook_target(spec, config, settings)
    raise ConfigError(
        f"target {spec!r}: unknown kind (expected python:module:function, https://..., the ARN of a "
        "Lambda function, SQS queue, SNS topic or EventBridge bus, or an SQS queue URL)"
    )


def waits_on_network(spec: str) -> bool:
    """Whether the target ``spec`` names spends a delivery waiting on the network: every kind but a
    Python function, which may as well compute."""
    return not spec.startswith(PYTHON)


def failing_target(reason: str) -> Target:
    """A target that cannot be loaded: every delivery fails with ``reason``, so its jobs retry and
    end as dead letters that say why, instead of vanishing."""

    def deliver(job: Job, timeout: float) -> None:
        raise ConfigError(reason)

    return deliver


__all__ = ["Target", "failing_target", "payload", "resolve_target", "waits_on_network"]
