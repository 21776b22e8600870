#!/usr/bin/env bash
# The distillation levers of issue #50 for one language, each changed alone from the distill-tam.yaml recipe (teacher
# laser-mini, own 8k BPE, 1x512 BiLSTM, English targets) at the same step budget, selected on FLORES-200 devtest
# (Tatoeba v1 is only reported afterwards, with evaluation.tatoeba):
#   bash training/distill_levers.sh LANG [OUT=runs/levers] [LEVERS="base size both multi multi-size dropout"]
# LANG is the data's code (eu, cy, ta ...). Levers:
#   base     the recipe as it is
#   size     a 2-layer student (model.num_layers=2)
#   both     the teacher on both sides (distillation.target_weight=1.0)
#   multi    non-English pairs: the student's sentences also learn the teacher's embeddings of their de, es, fr, it,
#            pt and ru translations (the multi-parallel corpora and Tatoeba's non-English pairs); it reads with the
#            base recipe's vocabulary (OUT/LANG-bpe: learn_bpe.py reads the config as train.py does, so this is the
#            BPE the base run learns: on Welsh, 2026-11-29, the same codes and vocabulary byte for byte; learned again
#            when the corpora change; one learned on these pairs would be another lever)
#   multi-size  multi with a 2-layer student
#   dropout  more dropout against over-fitting (model.dropout=0.3; these runs see their data 30 times)
# Two runs at a time, one thread each (a 2-core machine); every launch stops after MINUTES (default 60, data and
# teacher targets included) and running the script again continues each run where it stopped (--resume), so a run
# can span sessions; a run whose last checkpoint is step STEPS (default 3000) is left alone. The corpora are those of
# ../shared/data/parallel/train with a file named for LANG (CORPORA="dir dir ..." overrides), since training refuses a
# corpus that gives no pair.
set -euo pipefail
cd "$(dirname "$0")/.."
LANG_CODE="${1:?the language code of the data, e.g. eu}"
OUT="${2:-runs/levers}"
LEVERS="${3:-base size both multi multi-size dropout}"
MINUTES="${MINUTES:-60}"
STEPS="${STEPS:-3000}"
PARALLEL="${PARALLEL:-2}"
PYTHON="${PYTHON:-python}"
shared=../shared/data/parallel/train
if [ -z "${CORPORA:-}" ]; then
    CORPORA=""
    for corpus in "$shared"/*/; do  # ntrex128/eu.txt.gz, tatoeba/tatoeba.eu-en.eu.gz, wmt-news/*.ta-en.ta.gz ...
        # (grep -c reads all of ls: -q would stop at the first match and fail the pipe under pipefail)
        if ls "$corpus" | grep -cE "(^|[.-])$LANG_CODE([._-]|$)" > /dev/null; then CORPORA="$CORPORA ${corpus%/}"; fi
    done
fi
[ -n "$CORPORA" ] || { echo "no corpus in $shared has a file for $LANG_CODE" >&2; exit 2; }
corpora_list=$(echo $CORPORA | sed 's/ /, /g')
echo "== $LANG_CODE: corpora $corpora_list"

lever_args() {
    case "$1" in
        base) ;;
        size) echo "--set model.num_layers=2" ;;
        both) echo "--set distillation.target_weight=1.0" ;;
        multi) echo "--set data.target_languages=[en,de,es,fr,it,pt,ru] --set tokenizer.path=$OUT/$LANG_CODE-bpe" ;;
        multi-size) echo "$(lever_args multi) --set model.num_layers=2" ;;
        dropout) echo "--set model.dropout=0.3" ;;
        *) echo "unknown lever $1 (base size both multi multi-size dropout)" >&2; exit 2 ;;
    esac
}

run_lever() {
    local lever="$1" run="$OUT/$LANG_CODE-$1"
    local resume="" last
    last=$(ls "$run/checkpoints" 2>/dev/null | sort | tail -1 || true)
    if [ "$last" = "$(printf 'step-%08d' "$STEPS")" ]; then echo "== $run: finished ($last)"; return; fi
    [ -n "$last" ] && resume="--resume"
    mkdir -p "$OUT"
    # shellcheck disable=SC2046  # (the lever's arguments are words)
    OMP_NUM_THREADS=1 "$PYTHON" training/train.py --config training/configs/distill-tam.yaml --output-dir "$run" \
        $resume --set "data.source_languages=[$LANG_CODE]" --set "validation.languages=[$LANG_CODE, en]" \
        --set "data.corpora=[$corpora_list]" \
        --set "training.max_steps=$STEPS" --set "training.max_minutes=$MINUTES" $(lever_args "$lever") \
        >> "$run.log" 2>&1 && echo "== $run: launch ended ($(tail -1 "$run/metrics.jsonl" 2>/dev/null | cut -c1-80))" \
        || { echo "== $run: failed, see $run.log" >&2; return 1; }
}

for lever in $LEVERS; do lever_args "$lever" > /dev/null; done  # every name checked before anything runs
bpe="$OUT/$LANG_CODE-bpe"
bpe_args="--set data.source_languages=[$LANG_CODE] --set data.corpora=[$corpora_list]"
# (a kept BPE is reused only if learned from the same corpora; a run resumed on another reads its own OUT/tokenizer)
if [[ " $LEVERS " == *" multi"* ]] && [ "$(cat "$bpe/learned_with" 2>/dev/null)" != "$bpe_args" ]; then
    echo "== $bpe: learning the base recipe's BPE (the multi levers read with it)"
    rm -rf "$bpe" && mkdir -p "$OUT"
    OMP_NUM_THREADS=1 "$PYTHON" training/learn_bpe.py --config training/configs/distill-tam.yaml \
        --set "data.source_languages=[$LANG_CODE]" --set "data.corpora=[$corpora_list]" \
        --output-dir "$bpe" >> "$bpe.log" 2>&1 || { echo "== $bpe: failed, see $bpe.log" >&2; exit 1; }
    echo "$bpe_args" > "$bpe/learned_with"
fi
status=0
for lever in $LEVERS; do
    run_lever "$lever" &
    while [ "$(jobs -rp | wc -l)" -ge "$PARALLEL" ]; do wait -n || status=1; done
done
while [ "$(jobs -rp | wc -l)" -gt 0 ]; do wait -n || status=1; done
exit $status
