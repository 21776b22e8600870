"""`hf-laser download laser2 | laser3 LANG ... | sonar | owner/name`: the original LASER2 / LASER3 files from Meta's addresses,
checked, converted once into a model set in the cache (`hf_laser.checkpoints.download.fetch_models`); SONAR's text
encoder the same way into `CACHE/converted/sonar` (`fetch_sonar`, its CC BY-NC 4.0 licence said first); a Hub
model (a directory or a model set) into the Hub cache (`hub_snapshot`)."""

from __future__ import annotations

import argparse
import re
import sys

from ..checkpoints.download import ModelsNotAvailable, fetch_models, fetch_sonar, student_code
from ..errors import UsageError

WHO = "hf-laser download"


HUB_ID = re.compile(r"[\w.\-]+/[\w.\-]+")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("models", nargs="+", metavar="MODEL",
                        help="what to fetch, any of: laser2 (one encoder for every language: no language after it); "
                        "laser3 LANG [LANG ...] (the students of these languages: FLORES-200 codes such as wol_Latn, "
                        "ISO 639 codes, or English names); sonar (SONAR's text encoder: CC BY-NC 4.0, non-commercial "
                        "use only). Example: laser2 laser3 wol_Latn zul_Latn. Or, alone, a Hub model owner/name (a "
                        "model directory or a whole model set, into the Hub cache; its local directory is printed)")
    parser.add_argument("--revision", default=None,
                        help="with owner/name: a branch, tag or commit id (default: the main branch)")


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
    hub_ids = [token for token in args.models if HUB_ID.fullmatch(token)]
    if hub_ids:
        if len(args.models) > 1:
            raise UsageError("a Hub model (owner/name) is downloaded alone: one per command")
        # lazy: the Hub client, needed for Hub ids only
        from ..checkpoints.hub_snapshot import hub_snapshot

        try:
            local = hub_snapshot(hub_ids[0], revision=args.revision)
        except OSError as err:  # (an unreachable Hub is said as the user's to fix: exit status 2, one line)
            raise UsageError(str(err)) from None
        print(f"{WHO}: ready: {hub_ids[0]}" + (f" (revision {args.revision})" if args.revision else "")
              + f"; use it with --model {hub_ids[0]} (or the directory below)", file=sys.stderr)
        print(local)
        return 0
    if args.revision is not None:
        raise UsageError("--revision is for a Hub model (owner/name)")
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
