"""`python -m duecast.dispatcher`."""

import sys

from ..shared.process.failures import run_command
from .main import main

sys.exit(run_command("duecast dispatcher", main, sys.argv[1:]))
