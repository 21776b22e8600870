"""Carves a validation split out of the Tatoeba training pairs, so that model selection never looks at Tatoeba v1.

For every `tatoeba.{xx}-en` bitext with at least `--min-pairs` pairs, `--per-lang` pairs are drawn (fixed seed) with
the selection rules of Tatoeba v1 (at least three words, or five characters for Chinese/Japanese; no `@` or `http`;
no sentence twice on a side) and written as a two-language multi-parallel folder `OUT/valid/{xx}-en/{xx,en}.txt`.
The training copy `OUT/train/` holds every bitext of the source folder minus every pair (in any language pair) that
has a side equal to a held-out sentence, exactly or ignoring case and punctuation, so that no held-out sentence is
ever trained on:

    python training/split_tatoeba.py --src ../shared/data/parallel/train/tatoeba --out data/tatoeba-split

`OUT/split.json` records the arguments, the counts and the sha256 of every source file; a second run with the same
arguments and sources does nothing.
"""
from __future__ import annotations

import argparse
import gzip
import json
import random
import re
import shutil
import sys
import unicodedata
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `training` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from training.data import file_sha256  # noqa: E402

BITEXT = re.compile(r"^tatoeba\.(?P<a>[^.-]+)-(?P<b>[^.-]+)\.(?P<side>[^.]+)\.gz$")
SCRIPT_LANGS_WITHOUT_SPACES = ("zh", "ja", "yue", "wuu", "th", "lo", "km", "my")


def normalise(text: str) -> str:
    """Case- and punctuation-insensitive key of a sentence (the rule the shared data used against v1)."""
    text = unicodedata.normalize("NFKC", text).casefold()
    return " ".join("".join(c if not unicodedata.category(c).startswith("P") else " " for c in text).split())


def selectable(text: str, lang: str) -> bool:
    """Tatoeba v1's selection rules for a test sentence."""
    if "@" in text or "http" in text:
        return False
    if lang.split("_")[0] in SCRIPT_LANGS_WITHOUT_SPACES:
        return len(text.strip()) >= 5
    return len(text.split()) >= 3


def read_gz(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8", newline="\n") as f:
        return f.read().split("\n")[:-1]


def write_text(path: Path, lines: list[str], compress: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    if compress:
        # mtime=0: the same content gives the same bytes (the training data cache is keyed by file content)
        with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
            f.write(data)
    else:
        path.write_bytes(data)


def bitexts(src: Path) -> dict[tuple[str, str], tuple[Path, Path]]:
    found: dict[tuple[str, str], dict[str, Path]] = {}
    for path in sorted(src.iterdir()):
        m = BITEXT.match(path.name)
        if m:
            found.setdefault((m["a"], m["b"]), {})[m["side"]] = path
    incomplete = [f"{a}-{b}" for (a, b), sides in found.items() if set(sides) != {a, b}]
    if incomplete:
        raise SystemExit(f"error: bitexts without both sides in {src}: {', '.join(incomplete)}")
    if not found:
        raise SystemExit(f"error: no tatoeba.{{xx}}-{{yy}}.{{xx|yy}}.gz bitext in {src}")
    return {pair: (sides[pair[0]], sides[pair[1]]) for pair, sides in found.items()}


def split(src: Path, out: Path, per_lang: int, min_pairs: int, seed: int) -> dict:
    files = bitexts(src)
    sources = {p.name: file_sha256(p) for pair in files.values() for p in pair}
    args = {"per_lang": per_lang, "min_pairs": min_pairs, "seed": seed, "sources": sources}
    record = out / "split.json"
    if record.is_file() and json.loads(record.read_text()).get("args") == args:
        print(f"{out} is up to date (same arguments and sources)", file=sys.stderr)
        return json.loads(record.read_text())
    text = {pair: (read_gz(fa), read_gz(fb)) for pair, (fa, fb) in files.items()}
    held: dict[str, list[tuple[str, str]]] = {}
    held_keys: set[str] = set()
    for (a, b), (lines_a, lines_en) in sorted(text.items()):
        if b != "en" or len(lines_a) < min_pairs:
            continue
        order = list(range(len(lines_a)))
        random.Random(f"{seed}-{a}").shuffle(order)
        chosen, seen_a, seen_en = [], set(), set()
        for i in order:
            xa, xe = lines_a[i], lines_en[i]
            ka, ke = normalise(xa), normalise(xe)
            if not (selectable(xa, a) and selectable(xe, "en")) or ka in seen_a or ke in seen_en:
                continue
            chosen.append((xa, xe))
            seen_a.add(ka)
            seen_en.add(ke)
            if len(chosen) == per_lang:
                break
        held[a] = chosen
        held_keys |= seen_a | seen_en
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    for lang, rows in held.items():
        write_text(tmp / "valid" / f"{lang}-en" / f"{lang}.txt", [r[0] for r in rows], compress=False)
        write_text(tmp / "valid" / f"{lang}-en" / "en.txt", [r[1] for r in rows], compress=False)
    removed = {}
    for (a, b), (lines_a, lines_b) in text.items():
        keep = [i for i in range(len(lines_a))
                if normalise(lines_a[i]) not in held_keys and normalise(lines_b[i]) not in held_keys]
        removed[f"{a}-{b}"] = len(lines_a) - len(keep)
        if keep:  # a bitext left empty is dropped (the training data refuses empty corpora)
            fa, fb = files[(a, b)]
            write_text(tmp / "train" / fa.name, [lines_a[i] for i in keep], compress=True)
            write_text(tmp / "train" / fb.name, [lines_b[i] for i in keep], compress=True)
    result = {"args": args, "held_out": {lang: len(rows) for lang, rows in held.items()},
              "removed_from_training": {k: v for k, v in sorted(removed.items()) if v},
              "removed_total": sum(removed.values()), "pairs_kept": sum(len(t[0]) for t in text.values())
              - sum(removed.values())}
    (tmp / "split.json").write_text(json.dumps(result, indent=1))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", type=Path, default=Path("../shared/data/parallel/train/tatoeba"))
    parser.add_argument("--out", type=Path, default=Path("data/tatoeba-split"))
    parser.add_argument("--per-lang", type=int, default=250, help="held-out pairs per language (default 250)")
    parser.add_argument("--min-pairs", type=int, default=2000,
                        help="only xx-en bitexts with at least this many pairs give a validation set (default 2000)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    if not args.src.is_dir():
        print(f"error: {args.src} is not a folder", file=sys.stderr)
        return 2
    result = split(args.src, args.out, args.per_lang, args.min_pairs, args.seed)
    print(f"held out {sum(result['held_out'].values()):,} pairs in {len(result['held_out'])} languages; removed "
          f"{result['removed_total']:,} training pairs sharing a sentence with them; {result['pairs_kept']:,} kept",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
