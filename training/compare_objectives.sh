#!/usr/bin/env bash
# Compares the training objectives at equal wall-clock on laser-mini's data, model and schedule:
#   bash training/compare_objectives.sh [MINUTES=10] [OUT=runs/objectives]
# One run per objective (translation, ranking, translation+ranking), each stopped by training.max_minutes (from its
# launch, data preparation included), validated (FLORES, 500 sentences of the 12 languages + en:
# seconds, not minutes) and snapshotted every 200 steps; then training/report.py --curve
# gives FLORES and Tatoeba (12 languages) errors against minutes for each. All three train on the pairs with English
# only (`data.bitext_pairs=targets`): the decoder has no target embedding for a pair of two other languages, and the
# objectives must see the same data. Run it on an otherwise idle machine:
# the comparison is of wall-clock time.
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES="${1:-10}"
OUT="${2:-runs/objectives}"
for objective in ranking translation translation+ranking; do
    run="$OUT/${objective/+/-}"
    rm -rf "$run"
    OMP_WAIT_POLICY=PASSIVE accelerate launch --config_file training/accelerate_configs/cpu.yaml training/train.py \
        --config training/configs/laser-mini.yaml --output-dir "$run" --set "training.objective=$objective" \
        --set data.bitext_pairs=targets \
        --set "training.max_minutes=$MINUTES" --set training.eval_every=200 --set training.save_every=100000 \
        --set training.snapshot_encoders=true --set validation.max_sentences=500 \
        --set "validation.languages=[en, de, fr, es, it, pt, nl, pl, cs, ru, tr, fi, sv]"
done
for objective in ranking translation translation+ranking; do  # evaluated after all runs: no timing interference
    run="$OUT/${objective/+/-}"
    python training/report.py --run "$run" --curve --tatoeba-langs focus > /dev/null
    echo "== $objective"; sed -n '/against training time/,$p' "$run/report.md"
done
