"""`python -m hf_laser.serving [ARGS]`: the same as `hf-laser serve [ARGS]`."""

import sys

from ..commands.serve import main

sys.exit(main())
