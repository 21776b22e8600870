#!/usr/bin/env bash
# Issue #11 on a lent GPU machine, in three calls of the device tool (30 minutes of device time in all, 10 per
# command; a process started with setsid outlives its call while the machine stays warm, so the training spans
# calls 1 and 2). Prepared on this machine first (see training/README.md, "The GPU run"):
#   bash benchmarks/gpu_session.sh pack       # _carry/train.tar.xz (pretokenized corpora), _carry/bench.tar.xz,
#                                             # .whl/ (datasets, dill, multiprocess: absent there)
# Then, on the device (each a `run` call; name the carried paths):
#   1. carry [_carry, .whl]: bash benchmarks/gpu_session.sh train-start     (starts training, watches 9 minutes)
#   2. carry [_carry, .whl]: bash benchmarks/gpu_session.sh train-finish    (waits for it, exports to $OUT)
#   3. carry [_carry, .whl]: bash benchmarks/gpu_session.sh bench           (train/embed/LSTM throughput to $OUT)
# and here: bash benchmarks/gpu_session.sh unpack DIR2 DIR3 (the files_at of calls 2 and 3), then the report.
set -euo pipefail
cd "$(dirname "$0")/.."
STATE=/tmp/hf_laser_gpu   # survives between calls while the machine is warm
RUN=$STATE/runs/laser-base
MINUTES=${GPU_SESSION_MINUTES:-15}

setup() {  # on the device: the carried wheels, hf_laser from the tree, the data where the configs expect it
  if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  fi
  export PYTHONPATH="$PWD/src:$PWD:/tmp/site" PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
  mkdir -p "$STATE"
  [ -d _carry/pretok ] || { [ -f _carry/train.tar.xz ] && tar -xJf _carry/train.tar.xz -C _carry; }
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
  tar -C .. -cf - shared/reference/bpe shared/reference/tatoeba_langs.tsv shared/data/tatoeba/v1 \
    shared/data/parallel/train/libreoffice | xz -T2 -9 > _carry/bench.tar.xz
  mkdir -p .whl
  for w in datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19; do  # the versions of this venv
    $python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl "$w"
  done
  rm -rf _carry/pretok   # only the archive travels (64 MiB per call, the working tree included)
  du -ch _carry/*.tar.xz .whl/* | tail -1
  ;;
train-start)
  setup
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  setsid nohup accelerate launch --config_file training/accelerate_configs/1gpu.yaml training/train.py \
    --config _carry/pretok/config.yaml --output-dir "$RUN" --set training.max_minutes="$MINUTES" \
    ${GPU_SESSION_SET:-} > "$STATE/train.log" 2>&1 &
  for _ in $(seq 54); do sleep 10; tail -c 300 "$STATE/train.log" | tr '\r' '\n' | tail -1; done
  ;;
train-finish)
  setup
  while pgrep -f training/train.py >/dev/null; do sleep 10; done
  tail -5 "$STATE/train.log"
  python3 - "$RUN" <<'EOF'
import shutil, sys, tarfile, pathlib
from hf_laser import LaserModel
run = pathlib.Path(sys.argv[1])
for name in ("final", "untrained"):   # fp16, what would be shipped; both for training/report.py
    shutil.copytree(run / name, run / f"{name}-fp16", ignore=shutil.ignore_patterns("model*.safetensors*"))
    LaserModel.from_pretrained(run / name).half().save_pretrained(run / f"{name}-fp16")
    with tarfile.open(run / f"{name}.tar", "w") as tar:
        tar.add(run / f"{name}-fp16", arcname=f"laser-base/{name}")
        if name == "final":
            for meta in ("config.yaml", "metrics.jsonl", "data_stats.json"):
                tar.add(run / meta, arcname=f"laser-base/{meta}")
EOF
  cp "$STATE/train.log" "$OUT/train.log"
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
  if [ -f "$RUN/untrained.tar" ]; then split -b 15M -d "$RUN/untrained.tar" "$OUT/untrained.tar.part"; fi
  ;;
unpack)  # here: the files of calls 2 and 3 (their files_at folders) -> runs/laser-base
  for dir in "${@:2}"; do
    for part in final untrained; do
      if ls "$dir/$part.tar.part"* >/dev/null 2>&1; then cat "$dir/$part.tar.part"* | tar -xf - -C runs; fi
    done
  done
  echo "then: python training/report.py --run runs/laser-base --tatoeba-langs all --bucc-dir ../shared/data/mining"
  ;;
*)
  sed -n 2,12p "$0"; exit 2
  ;;
esac
