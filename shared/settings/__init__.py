"""Every setting of every role, validated once at start-up (pydantic-settings), one module per section.

Sources: `DUECAST_*` environment variables (nested with `__`) over an optional TOML file. Secrets are
`SecretStr` and input values are never echoed in validation errors.
"""

from .base import Identifier
from .model import Settings, SettingsFileError, load_settings
from .roles import (
    DispatcherSettings,
    HealthSettings,
    WebSettings,
    WorkerSettings,
)
from .servers import MySQLSettings, RedisSettings
from .sources import (
    JOBS_SOURCE,
    JobsSettings,
    QueueName,
    ScheduleSettings,
    SourceSettings,
)
from .topics import (
    RETRY_STEPS_S,
    TOPICS_SOURCE,
    GroupSettings,
    StartAt,
    TopicName,
    TopicsSettings,
    topic_source,
)

__all__ = [
    "JOBS_SOURCE",
    "RETRY_STEPS_S",
    "TOPICS_SOURCE",
    "DispatcherSettings",
    "GroupSettings",
    "HealthSettings",
    "Identifier",
    "JobsSettings",
    "MySQLSettings",
    "QueueName",
    "RedisSettings",
    "ScheduleSettings",
    "Settings",
    "SettingsFileError",
    "SourceSettings",
    "StartAt",
    "TopicName",
    "TopicsSettings",
    "WebSettings",
    "WorkerSettings",
    "load_settings",
    "topic_source",
]
