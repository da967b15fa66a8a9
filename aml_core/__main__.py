"""``python -m aml_core`` is the ``aml`` command."""

import sys

from .cli import main

sys.exit(main())
