"""Every setting of every role, validated once at start-up (pydantic-settings), one module per section.

Sources: `DUECAST_*` environment variables (nested with `__`) over an optional TOML file. Secrets are
`SecretStr` and input values are never echoed in validation errors.
"""

from duecast.shared.settings.base import Identifier
from duecast.shared.settings.model import Settings, SettingsFileError, load_settings
from duecast.shared.settings.roles import (
    DispatcherSettings,
    HealthSettings,
    WebSettings,
    WorkerSettings,
)
from duecast.shared.settings.servers import MySQLSettings, RedisSettings
from duecast.shared.settings.sources import (
    JOBS_SOURCE,
    JobsSettings,
    QueueName,
    ScheduleSettings,
    SourceSettings,
)
from duecast.shared.settings.topics import (
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
