"""``python -m jaxpo.cli``: the ``jaxpo`` command."""

import sys

from jaxpo.cli import main

sys.exit(main())
