#!/usr/bin/env bash
# Training on a lent GPU machine (issues #26, #27), within the device tool's limits (15 minutes of device time per
# session, the machine's start included; 10 minutes per command; 64 MiB carried per call). Prepared on this machine
# first (see training/README.md, "The GPU run"):
#   bash benchmarks/gpu_session.sh pack       # _carry/train.tar.xz (pretokenized corpora), .whl/ (the packages the
#                                             # device image lacks); PACK_BENCH=1 adds _carry/bench.tar.xz
# The archive is ~60 MB, so laser-mini's weights (src/hf_laser/models/laser-mini/model.safetensors, 24 MB) cannot
# travel in the same call. Make them untracked and ignored for the session (git rm --cached FILE; FILE in
# .git/info/exclude; git reset FILE afterwards) and, if _carry/pretok is still here from `pack`, move it aside. Then
# on the device, each a `run` call:
#   carry [_carry, .whl]: python3 -m pip install ... --target /tmp/site .whl/*.whl; tar -xJf _carry/train.tar.xz
#       -C /tmp/hf_laser_gpu      (16 s; a run that only needs the tokenizer, laser-base, can train in this call)
#   carry [src/hf_laser/models/laser-mini/model.safetensors], at once (the machine stays warm 30 s):
#       ln -s /tmp/hf_laser_gpu/pretok _carry/pretok; bash benchmarks/gpu_session.sh train [NAME "SETS" ...]
#                                             (training for GPU_SESSION_MINUTES, one run per NAME side by side,
#                                             fp16 export in 15 MB parts to $OUT; the call lasts ~1 minute more)
#   bash benchmarks/gpu_session.sh bench      (train/embed/LSTM throughput to $OUT; needs PACK_BENCH=1)
# and here: bash benchmarks/gpu_session.sh unpack DIR (the files_at of the call), then training/report.py.
set -euo pipefail
cd "$(dirname "$0")/.."
STATE=/tmp/hf_laser_gpu   # survives between calls while the machine is warm
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
train)  # one call: the training in the foreground (GPU_SESSION_MINUTES from its launch), then the export to $OUT.
  # Arguments: NAME "SETS" pairs, one run each, launched side by side on the one GPU (a small model leaves it idle
  # between kernels and 16 cores collate for two); none: one run named laser-base with GPU_SESSION_SET.
  setup
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
  shift
  if [ $# -eq 0 ]; then set -- laser-base "${GPU_SESSION_SET:-}"; fi
  if [ $(($# % 2)) -ne 0 ]; then echo "train: expected NAME \"SETS\" pairs, got $*" >&2; exit 2; fi
  names=()
  set +e   # the logs come back through $OUT whatever happens
  while [ $# -gt 0 ]; do
    name=$1 sets=$2; shift 2; names+=("$name")
    # shellcheck disable=SC2086  # SETS is a list of --set KEY=VALUE words
    accelerate launch --config_file "${ACCELERATE_CONFIG:-training/accelerate_configs/1gpu.yaml}" training/train.py \
      --config "${GPU_SESSION_CONFIG:-_carry/pretok/config.yaml}" --output-dir "$STATE/runs/$name" \
      --set training.max_minutes="$MINUTES" $sets 2>&1 | tr '\r' '\n' \
      | grep --line-buffered -v -E "(it/s|s/it|examples/s)[^]]*\]$" > "$OUT/$name.log" &   # no progress bars
  done
  wait
  set -e
  # fp16 (what would be shipped; GPU_SESSION_EXPORT=fp32 keeps float32) with the run's config, metrics and data
  # statistics, in 15 MB parts ($OUT takes 8 files of 16 MiB at most)
  python3 - "$STATE/runs" "${GPU_SESSION_EXPORT:-fp16}" "${names[@]}" <<'EOF'
import json, shutil, sys, tarfile, pathlib
from hf_laser import LaserModel
runs, dtype, names = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
for name in names:
    run = runs / name
    if not (run / "final" / "config.json").is_file():
        print(f"{name}: no final model (see {name}.log)"); continue
    export = run / f"final-{dtype}"
    shutil.copytree(run / "final", export, ignore=shutil.ignore_patterns("model*.safetensors*"))
    model = LaserModel.from_pretrained(run / "final")
    (model.half() if dtype == "fp16" else model).save_pretrained(export)
    config = json.loads((export / "config.json").read_text())
    config["dtype"] = "float32"  # stored in float16, computed in float32 (as the shipped model: float16 on a CPU
    (export / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")  # is much slower)
    with tarfile.open(runs / f"{name}.tar", "w") as tar:
        tar.add(export, arcname=f"{name}/final")
        for meta in ("config.yaml", "metrics.jsonl", "data_stats.json"):
            if (run / meta).is_file():
                tar.add(run / meta, arcname=f"{name}/{meta}")
EOF
  for name in "${names[@]}"; do
    if [ -f "$STATE/runs/$name.tar" ]; then split -b 15M -d "$STATE/runs/$name.tar" "$OUT/$name.tar.part"; fi
  done
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
unpack)  # here: the files of the train call (its files_at folder) -> runs/NAME for each run
  mkdir -p runs
  for first in "$2"/*.tar.part00; do
    name=$(basename "${first%.tar.part00}")
    cat "${first%00}"* | tar -xf - -C runs
    echo "runs/$name: then python training/report.py --run runs/$name --tatoeba-langs all --bucc-dir ../shared/data/mining"
  done
  ;;
*)
  sed -n 2,10p "$0"; exit 2
  ;;
esac
