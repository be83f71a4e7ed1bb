"""`python -m duecast.worker`."""

import sys

from duecast.shared.process.failures import run_command
from duecast.worker.main import main

sys.exit(run_command("duecast worker", main, sys.argv[1:]))
