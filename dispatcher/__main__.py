"""`python -m duecast.dispatcher`."""

import sys

from duecast.dispatcher.main import main
from duecast.shared.process.failures import run_command

sys.exit(run_command("duecast dispatcher", main, sys.argv[1:]))
