"""`hf-laser download laser2 | laser3 LANG ...`: the original LASER2 / LASER3 files from Meta's addresses, checked,
converted once into a model set in the cache (`hf_laser.checkpoints.download.fetch_models`)."""

from __future__ import annotations

import argparse
import sys

from ..checkpoints.download import ModelsNotAvailable, fetch_models, student_code
from ..errors import UsageError

WHO = "hf-laser download"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("models", nargs="+", metavar="laser2|laser3 LANG",
                        help="laser2, and/or laser3 followed by the languages of the students to fetch (FLORES-200 "
                        "codes such as wol_Latn, ISO 639 codes, or English names)")


def parse_models(tokens: list[str]) -> list[str]:
    """`["laser2", "laser3", "wolof", "zul"]` -> `["laser2", "wol_Latn", "zul_Latn"]` (UsageError when wrong)."""

    names, in_laser3 = [], False
    for token in tokens:
        if token == "laser2":
            names.append("laser2")
            in_laser3 = False
        elif token == "laser3":
            in_laser3 = True
        elif not in_laser3:
            raise UsageError(f"{token!r}: give laser2, or laser3 followed by languages (laser3 wol_Latn zul_Latn)")
        else:
            try:
                names.append(student_code(token))
            except ValueError as err:
                raise UsageError(str(err)) from None
    if in_laser3 and not any(n != "laser2" for n in names):
        raise UsageError("laser3 needs at least one language: laser3 wol_Latn")
    return list(dict.fromkeys(names))


def run(args: argparse.Namespace) -> int:
    names = parse_models(args.models)
    try:
        root = fetch_models(names, say=lambda m: print(f"{WHO}: {m}", file=sys.stderr))
    except ModelsNotAvailable as err:
        raise UsageError(str(err)) from None
    print(f"{WHO}: ready: {root} (a model set: {', '.join(names)}); use it with --model {root}", file=sys.stderr)
    return 0
