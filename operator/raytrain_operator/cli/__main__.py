"""``python -m raytrain_operator.cli``: the ``raytrain`` command without its console script."""

import sys

from raytrain_operator.cli import main

sys.exit(main())
