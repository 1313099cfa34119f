"""delayq: a delay queue on Redis, shipped as three AWS Lambda handlers.

from delayq import Queue
queue = Queue.from_env()
queue.enqueue("orders", {"order": 1042}, id="close-1042", delay=600)
"""

from .errors import (
    ConfigError,
    DelayqError,
    InvalidField,
    JobDead,
    JobExists,
    JobNotFound,
    JobReserved,
    PermanentFailure,
    RedisUnavailable,
    ScheduleNotFound,
    TooLarge,
    UnknownTopic,
)
from .job import DeadJob, Job, JobInfo, Scheduled, TopicStats
from .queue import Queue
from .recurring import ScheduleInfo
from .settings import Settings, TopicConfig, Topics

__all__ = [
    "ConfigError",
    "DeadJob",
    "DelayqError",
    "InvalidField",
    "Job",
    "JobDead",
    "JobExists",
    "JobInfo",
    "JobNotFound",
    "JobReserved",
    "PermanentFailure",
    "Queue",
    "RedisUnavailable",
    "ScheduleInfo",
    "ScheduleNotFound",
    "Scheduled",
    "Settings",
    "TooLarge",
    "TopicConfig",
    "TopicStats",
    "Topics",
    "UnknownTopic",
]
