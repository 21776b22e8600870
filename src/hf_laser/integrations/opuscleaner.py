"""hf_laser inside OpusCleaner (0.7): a filter definition in OpusCleaner's format (a JSON file of type
`bilingual`, its parameters, and the shell command its pipeline runner pipes the corpus through) that runs
`hf-laser score` on the TSV of the pipeline and prints the kept pairs.

    hf-laser score --opuscleaner-filter > filters/hf_laser_score.json      # or write_opuscleaner_filter("filters")
    opuscleaner-clean --filters 'filters/*.json' pipeline.filters.json de en -i corpus.tsv > clean.tsv

`hf-laser` must be on the `PATH` of the runner (the environment hf-laser is installed in). The margin is computed
over the sentences the command is given: with `opuscleaner-clean --parallel N`, each batch of `--batch-size`
lines is its own corpus (the default, one process, scores the whole corpus at once).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["FILTER_NAME", "opuscleaner_filter", "write_opuscleaner_filter"]

FILTER_NAME = "hf_laser_score"

COMMAND = ('hf-laser score --tsv - --keep - --no-progress --src-lang "$SRCLANG" --tgt-lang "$TGTLANG" '
           '--method "$METHOD" --margin "$MARGIN" --threshold "$THRESHOLD" ${MODEL:+--model "$MODEL"} '
           '${CHECK_LANG:+--check-lang}')


def opuscleaner_filter() -> dict:
    """The filter definition, as OpusCleaner reads it from `filters/hf_laser_score.json`."""
    return {
        "type": "bilingual",
        "description": "LASER score of each pair with hf-laser (the margin over the corpus's own sentences, or the "
                       "cosine), any LASER model or model set; keeps the pairs scoring at least THRESHOLD.",
        "parameters": {
            "SRCLANG": {"type": "str", "required": True, "default": None,
                        "help": "Language of the first column (ISO 639 code, FLORES-200 code or English name)"},
            "TGTLANG": {"type": "str", "required": True, "default": None,
                        "help": "Language of the second column"},
            "THRESHOLD": {"type": "float", "default": 1.06,
                          "help": "Minimum score kept (1.06: NLLB's ratio-margin threshold; a cosine or distance "
                                  "threshold depends on the model)"},
            "METHOD": {"type": "str", "default": "margin", "allowed_values": ["margin", "cosine"],
                       "help": "margin (over the corpus's own sentences) or cosine"},
            "MARGIN": {"type": "str", "default": "ratio", "allowed_values": ["ratio", "distance"],
                       "help": "margin function"},
            "MODEL": {"type": "str", "default": "",
                      "help": "model directory, model set or Hub id (empty: the shipped laser-mini)"},
            "CHECK_LANG": {"type": "bool", "default": False,
                           "help": "also remove pairs detected in another language (py3langid)"},
        },
        "command": COMMAND,
    }


def write_opuscleaner_filter(directory: str | os.PathLike) -> Path:
    """Writes the filter definition as `directory/hf_laser_score.json` (for `opuscleaner-clean --filters` or the
    `filters/` directory OpusCleaner's server reads) and returns its path."""
    path = Path(directory) / f"{FILTER_NAME}.json"
    path.write_text(json.dumps(opuscleaner_filter(), indent=4) + "\n", encoding="utf-8")
    return path
