"""`hf-laser download laser2 | laser3 LANG ... | sonar`: the original LASER2 / LASER3 files from Meta's addresses,
checked, converted once into a model set in the cache (`hf_laser.checkpoints.download.fetch_models`); SONAR's text
encoder the same way into `CACHE/converted/sonar` (`fetch_sonar`, its CC BY-NC 4.0 licence said first)."""

from __future__ import annotations

import argparse
import sys

from ..checkpoints.download import ModelsNotAvailable, fetch_models, fetch_sonar, student_code
from ..errors import UsageError

WHO = "hf-laser download"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("models", nargs="+", metavar="MODEL",
                        help="what to fetch, any of: laser2 (one encoder for every language: no language after it); "
                        "laser3 LANG [LANG ...] (the students of these languages: FLORES-200 codes such as wol_Latn, "
                        "ISO 639 codes, or English names); sonar (SONAR's text encoder: CC BY-NC 4.0, non-commercial "
                        "use only). Example: laser2 laser3 wol_Latn zul_Latn")


def parse_models(tokens: list[str]) -> list[str]:
    """`["laser2", "laser3", "wolof", "zul", "sonar"]` -> `["laser2", "wol_Latn", "zul_Latn", "sonar"]` (UsageError
    when wrong)."""

    names, in_laser3, languages = [], False, 0

    def end_laser3() -> None:
        if in_laser3 and not languages:
            raise UsageError("laser3 needs at least one language: laser3 wol_Latn")

    for token in tokens:
        if token in ("laser2", "sonar"):
            end_laser3()
            names.append(token)
            in_laser3 = False
        elif token == "laser3":
            end_laser3()
            in_laser3, languages = True, 0
        elif not in_laser3:
            raise UsageError(f"{token!r}: give laser2, laser3 followed by languages (laser3 wol_Latn zul_Latn), "
                             "or sonar")
        else:
            try:
                names.append(student_code(token))
            except ValueError as err:
                raise UsageError(str(err)) from None
            languages += 1
    end_laser3()
    return list(dict.fromkeys(names))


def run(args: argparse.Namespace) -> int:
    names = parse_models(args.models)
    laser = [n for n in names if n != "sonar"]

    def say(message: str) -> None:
        print(f"{WHO}: {message}", file=sys.stderr)

    try:
        root = fetch_models(laser, say=say) if laser else None
        sonar = fetch_sonar(say=say) if "sonar" in names else None
    except ModelsNotAvailable as err:
        raise UsageError(str(err)) from None
    if root is not None:
        print(f"{WHO}: ready: {root} (a model set: {', '.join(laser)}); use it with --model {root}", file=sys.stderr)
    if sonar is not None:
        print(f"{WHO}: ready: {sonar} (SONAR's text encoder, CC BY-NC 4.0: non-commercial use only); use it with "
              f"--model sonar (where no local directory is named sonar) or --model {sonar}", file=sys.stderr)
    return 0
