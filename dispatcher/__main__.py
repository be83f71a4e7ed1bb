"""`python -m duecast.dispatcher`."""

import sys

from duecast.dispatcher.main import main

sys.exit(main())
