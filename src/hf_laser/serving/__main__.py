"""`python -m hf_laser.serving [ARGS]`: the same as `hf-laser serve [ARGS]`."""

import sys

from hf_laser.cli import main

sys.exit(main(["serve", *sys.argv[1:]]))
