"""delayq: a delay queue on Redis, shipped as three AWS Lambda handlers.

from delayq import Queue
queue = Queue.from_env()
queue.enqueue("orders", {"order": 1042}, id="close-1042", delay=600)
"""

from .core.errors import (
    ConfigError,
    DelayqError,
    InvalidField,
    JobDead,
    JobDone,
    JobExists,
    JobNotFound,
    JobReserved,
    NotReplicated,
    PermanentFailure,
    RedisUnavailable,
    RetryAfter,
    ScheduleNotFound,
    TooLarge,
    TopicNotFound,
    UnknownTopic,
)
from .core.job import DeadJob, EnqueueResult, Job, JobInfo, Refused, Scheduled, TopicStats
from .core.recurring import ScheduleInfo
from .core.settings import Settings, TopicConfig, Topics
from .store.listing import Bucket, Forecast, JobPage, TopicPage
from .store.queue import Queue
from .version import VERSION as __version__

__all__ = [
    "Bucket",
    "ConfigError",
    "DeadJob",
    "DelayqError",
    "EnqueueResult",
    "Forecast",
    "InvalidField",
    "Job",
    "JobDead",
    "JobDone",
    "JobExists",
    "JobInfo",
    "JobNotFound",
    "JobPage",
    "JobReserved",
    "NotReplicated",
    "PermanentFailure",
    "Queue",
    "RedisUnavailable",
    "Refused",
    "RetryAfter",
    "ScheduleInfo",
    "ScheduleNotFound",
    "Scheduled",
    "Settings",
    "TooLarge",
    "TopicConfig",
    "TopicNotFound",
    "TopicPage",
    "TopicStats",
    "Topics",
    "UnknownTopic",
    "__version__",
]
