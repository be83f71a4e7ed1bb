"""The reference SQL in sql/ must be exactly what the code generates (no drift)."""

from pathlib import Path

from duecast.shared.settings import JobsSettings
from duecast.shared.storage.admin.demo_table import source
from duecast.shared.storage.schema import (
    TableInfo,
    cursors_table_ddl,
    jobs_table_ddl,
    runs_table_ddl,
    schedules_table_ddl,
    source_migration,
)

SQL_DIR = Path(__file__).resolve().parents[3] / "sql"


def _statements(path: Path) -> list[str]:
    """Statements of a file, comments dropped, split on the `;` that ends a line."""
    body = "\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("--"))
    return [s.strip().removesuffix(";") for s in (body + "\n").split(";\n") if s.strip()]


def test_jobs_sql_matches_generated_ddl() -> None:
    assert _statements(SQL_DIR / "jobs.sql") == [
        jobs_table_ddl(JobsSettings()),
        schedules_table_ddl(JobsSettings()),
        runs_table_ddl(JobsSettings()),
        cursors_table_ddl(JobsSettings()),
    ]


def test_user_block_status_migration_matches_generated_alters() -> None:
    info = TableInfo({"user_id": "bigint", "status": "int", "updated_time": "datetime"}, [])
    generated = source_migration(source(), info)
    file_statements = _statements(SQL_DIR / "user_block_status.sql")
    assert file_statements[0].startswith("CREATE TABLE IF NOT EXISTS `user_block_status`")
    assert file_statements[1:] == generated
