"""`python -m ragkb` is the `ragkb` command."""

import sys

from ragkb.cli import main

sys.exit(main())
