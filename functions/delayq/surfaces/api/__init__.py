"""The HTTP API on Powertools' event handler: the routes (``routes.py``), what they answer
(``schemas.py``), and the app that answers them for one queue (``resolver.py``, ``create_app``), for API
Gateway events of either payload format. ``GET /openapi.json`` is generated from the same models that
validate the requests."""

from .resolver import DelayqResolver, create_app
from .routes import delayq_error
from .schemas import (
    BatchItemOut,
    BatchOut,
    BucketOut,
    CancelledOut,
    DeadJobOut,
    DeadListOut,
    ErrorOut,
    ForecastOut,
    HealthOut,
    JobOut,
    JobPageOut,
    KeyOut,
    KeyPageOut,
    KeySettings,
    LatenessOut,
    PausedOut,
    PurgedOut,
    ReplayedOut,
    ScheduledOut,
    ScheduleListOut,
    ScheduleOut,
    TopicOut,
    TopicPageOut,
    UnavailableOut,
)

__all__ = [
    "BatchItemOut",
    "BatchOut",
    "BucketOut",
    "CancelledOut",
    "DeadJobOut",
    "DeadListOut",
    "DelayqResolver",
    "ErrorOut",
    "ForecastOut",
    "HealthOut",
    "JobOut",
    "JobPageOut",
    "KeyOut",
    "KeyPageOut",
    "KeySettings",
    "LatenessOut",
    "PausedOut",
    "PurgedOut",
    "ReplayedOut",
    "ScheduleListOut",
    "ScheduleOut",
    "ScheduledOut",
    "TopicOut",
    "TopicPageOut",
    "UnavailableOut",
    "create_app",
    "delayq_error",
]
