#!/usr/bin/env bash
# Issue #26 on a lent GPU machine, within the device tool's limits (15 minutes of device time per session, the
# machine's start included; 10 minutes per command; 64 MiB carried per call). Prepared on this machine first (see
# training/README.md, "The GPU run"):
#   bash benchmarks/gpu_session.sh pack       # _carry/train.tar.xz (pretokenized corpora), .whl/ (the packages the
#                                             # device image lacks); PACK_BENCH=1 adds _carry/bench.tar.xz
# The archive is ~60 MB: move src/hf_laser/models/laser-mini/model.safetensors (24 MB; the run needs only that
# folder's tokenizer) out of the working tree during the call, so that it does not travel. Then on the device, each a
# `run` call naming the carried paths [_carry, .whl]:
#   bash benchmarks/gpu_session.sh train      (setup, training for GPU_SESSION_MINUTES, fp16 export in parts to $OUT)
#   bash benchmarks/gpu_session.sh bench      (train/embed/LSTM throughput to $OUT; needs PACK_BENCH=1)
# and here: bash benchmarks/gpu_session.sh unpack DIR (the files_at of the call), then training/report.py.
set -euo pipefail
cd "$(dirname "$0")/.."
STATE=/tmp/hf_laser_gpu   # survives between calls while the machine is warm
RUN=$STATE/runs/laser-base
MINUTES=${GPU_SESSION_MINUTES:-7.5}

setup() {  # on the device: the carried wheels, hf_laser from the tree, the data where the configs expect it
  if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  fi
  export PYTHONPATH="$PWD/src:$PWD:/tmp/site" PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
  mkdir -p "$STATE"
  if [ ! -d _carry/pretok ] && [ -f _carry/train.tar.xz ]; then tar -xJf _carry/train.tar.xz -C _carry; fi
  python3 - <<'EOF'
import torch, transformers, accelerate, datasets, hf_laser
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}), "
      f"transformers {transformers.__version__}, accelerate {accelerate.__version__}, datasets {datasets.__version__}, "
      f"GPU: {torch.cuda.get_device_name() if torch.cuda.is_available() else 'none'}")
EOF
}

case "${1:-}" in
pack)  # here, not on the device
  python=${PYTHON:-.venv/bin/python}
  rm -rf _carry/pretok
  $python training/pretokenize.py --config training/configs/laser-base.yaml --output-dir _carry/pretok --num-proc 2
  tar -C _carry -cf - pretok | xz -T2 -9 > _carry/train.tar.xz
  if [ "${PACK_BENCH:-0}" = 1 ]; then
    tar -C .. -cf - shared/reference/bpe shared/reference/tatoeba_langs.tsv shared/data/tatoeba/v1 \
      shared/data/parallel/train/libreoffice | xz -T2 -9 > _carry/bench.tar.xz
  fi
  mkdir -p .whl
  # what hf_laser and training/ import that the device image lacks, at the versions of this venv (not py3langid,
  # 4.6 MB, only for lang="auto": the 64 MiB carried per call are the working tree + archive + wheels)
  for w in datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 transliterate==1.10.2 filelock==4.3.1; do
    $python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl "$w"
  done
  rm -rf _carry/pretok   # only the archive travels (64 MiB per call, the working tree included)
  du -ch _carry/*.tar.xz .whl/* | tail -1
  ;;
train)  # one call: the training in the foreground (GPU_SESSION_MINUTES from its launch), then the fp16 export
  setup
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
  set +e   # the log comes back through $OUT whatever happens
  accelerate launch --config_file "${ACCELERATE_CONFIG:-training/accelerate_configs/1gpu.yaml}" training/train.py \
    --config "${GPU_SESSION_CONFIG:-_carry/pretok/config.yaml}" --output-dir "$RUN" \
    --set training.max_minutes="$MINUTES" \
    ${GPU_SESSION_SET:-} 2>&1 | tr '\r' '\n' \
    | grep --line-buffered -v -E "(it/s|s/it|examples/s)[^]]*\]$" | tee "$OUT/train.log"   # no progress bars
  set -e
  cp "$RUN/metrics.jsonl" "$OUT/" 2>/dev/null || true
  python3 - "$RUN" <<'EOF'
import shutil, sys, tarfile, pathlib
from hf_laser import LaserModel
run = pathlib.Path(sys.argv[1])
# fp16, what would be shipped
shutil.copytree(run / "final", run / "final-fp16", ignore=shutil.ignore_patterns("model*.safetensors*"))
LaserModel.from_pretrained(run / "final").half().save_pretrained(run / "final-fp16")
with tarfile.open(run / "final.tar", "w") as tar:
    tar.add(run / "final-fp16", arcname="laser-base/final")
    for meta in ("config.yaml", "metrics.jsonl", "data_stats.json"):
        tar.add(run / meta, arcname=f"laser-base/{meta}")
EOF
  split -b 15M -d "$RUN/final.tar" "$OUT/final.tar.part"
  ls -la "$OUT"
  ;;
bench)
  setup
  mkdir -p ../shared && tar -xJf _carry/bench.tar.xz -C ..
  for cmd in "train_throughput.py --device cuda --dtype fp32" "train_throughput.py --device cuda --dtype bf16" \
             "train_throughput.py --device cuda --dtype bf16 --compile" "lstm_ceiling.py --device cuda" \
             "embed_throughput.py --device cuda --langs fra,deu,rus,spa --num-proc 8 \
                --corpus-langs de,fr,es,ru,it,pt,nl"
  do  # one failure does not cost the others
    echo "== $cmd"; python3 benchmarks/$cmd || echo "== FAILED ($?): $cmd"
  done 2>&1 | tee "$OUT/bench.log"
  ;;
unpack)  # here: the files of the train call (its files_at folder) -> runs/laser-base
  mkdir -p runs
  cat "$2/final.tar.part"* | tar -xf - -C runs
  echo "then: python training/report.py --run runs/laser-base --tatoeba-langs all --bucc-dir ../shared/data/mining"
  ;;
*)
  sed -n 2,10p "$0"; exit 2
  ;;
esac
