"""`python -m hf_laser.mining {mine,embed-shards}` (the module form that `accelerate launch -m` / `torchrun -m`
start): the command line of `hf_laser/commands/mine.py`."""

import sys

from hf_laser.commands.mine import main

sys.exit(main())
