"""`hf-laser push`: a model directory, its model card with evaluation results, and the results files -> the Hub
(`hf_laser.checkpoints.hub.push_to_hub`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..checkpoints.hub import __doc__ as doc
from ..checkpoints.hub import push_to_hub


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model_dir", help="model directory (hf-laser convert / save_pretrained output)")
    parser.add_argument("--repo-id", required=True, help="target Hub repository, e.g. user/laser-93langs")
    parser.add_argument("--results", default=None, help="RESULTS_DIR of python -m evaluation.run (results.json, plots)")
    parser.add_argument("--private", action="store_true", help="create the repository as private")
    parser.add_argument("--revision", default=None, help="branch to commit to (created if missing)")
    parser.add_argument("--commit-message", default=None,
                        help="the Hub commit's message (default: \"Upload LASER model with hf_laser\")")
    parser.add_argument("--averages-only", action="store_true",
                        help="model-index gets only the averages (the card's tables still list every language)")
    parser.add_argument("--card-out", default=None, help="also write the generated README.md here")
    parser.add_argument("--dry-run", action="store_true", help="list what would be uploaded; no network")


def run(args: argparse.Namespace) -> int:
    try:
        summary = push_to_hub(args.model_dir, args.repo_id, results_dir=args.results, private=args.private,
                              revision=args.revision, commit_message=args.commit_message, dry_run=args.dry_run,
                              include_languages=not args.averages_only)
    except (FileNotFoundError, ValueError, RuntimeError) as err:
        print(f"hf-laser push: error: {err}", file=sys.stderr)
        return 2
    if args.card_out:
        Path(args.card_out).write_text(summary["card"], encoding="utf-8")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="hf-laser push", description=doc.split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
