"""`python -m duecast.worker`."""

import sys

from duecast.worker.main import main

sys.exit(main())
