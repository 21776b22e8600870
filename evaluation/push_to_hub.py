"""Upload a model directory with its evaluation results to the Hub (same as `hf-laser push`).

    python -m evaluation.push_to_hub MODEL_DIR --repo-id user/name --results RESULTS_DIR [--private] [--dry-run]

See `hf_laser.checkpoints.hub` for what goes into the model card and the commit.
"""

from __future__ import annotations

import sys

from hf_laser.commands.push import main

if __name__ == "__main__":
    sys.exit(main())
