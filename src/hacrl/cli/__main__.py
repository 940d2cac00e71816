"""``python -m hacrl.cli``: the ``hacrl`` command."""

import sys

from hacrl.cli import main

sys.exit(main())
