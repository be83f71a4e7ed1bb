"""`python -m duecast.worker`."""

import sys

from ..shared.process.failures import run_command
from .main import main

sys.exit(run_command("duecast worker", main, sys.argv[1:]))
