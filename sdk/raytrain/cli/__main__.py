"""``python -m raytrain.cli``: the ``raytrain`` command without its console script."""

import sys

from raytrain.cli import main

sys.exit(main())
