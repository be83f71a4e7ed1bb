"""`python -m duecast`."""

import sys

from duecast.cli import main

sys.exit(main())
