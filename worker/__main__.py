"""`python -m duecast.worker`."""

import sys

from ..shared.process import collector

collector.pause()  # until start_process: the role's imports are not walked by the collector

from ..shared.process.failures import run_command  # noqa: E402 - after the pause, on purpose
from .main import main  # noqa: E402

sys.exit(run_command("duecast worker", main, sys.argv[1:]))
