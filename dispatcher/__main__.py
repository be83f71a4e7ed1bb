"""`python -m dispatcher`."""

import sys

from dispatcher.main import main

sys.exit(main())
