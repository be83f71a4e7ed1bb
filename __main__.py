"""`python -m duecast`."""

import sys

from duecast.cli.commands import main

sys.exit(main())
