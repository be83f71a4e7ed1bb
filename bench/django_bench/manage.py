"""Django's command line for the benchmark project (migrate, db_worker)."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "djbench.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
