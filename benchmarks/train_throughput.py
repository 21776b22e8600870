"""Training throughput and peak memory of `LaserForPreTraining` (default: the paper's size).

    python benchmarks/train_throughput.py --device cpu --max-tokens 2000 --steps 3
    python benchmarks/train_throughput.py --device cuda --dtype bf16 --max-tokens 8000 [--compile]

One step = forward + backward + gradient clipping + Adam update on a batch of `--max-tokens` tokens per side
(sentences of `--length` tokens, random ids), as `training/train.py` runs it. Reports target tokens per second (median
over the timed steps, after `--warmup` untimed ones) and peak memory (CUDA: `max_memory_allocated`; CPU: peak RSS of
the process), as one JSON line.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from hf_laser.modeling.configuration_laser import LaserConfig  # noqa: E402
from hf_laser.modeling.modeling_laser import LaserForPreTraining  # noqa: E402



def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], default="fp32", help="autocast dtype (fp32: none)")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--max-tokens", type=int, default=8000, help="tokens per side and batch (paper: 8000 per GPU)")
    p.add_argument("--length", type=int, default=25, help="tokens per sentence, </s> included")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--vocab-size", type=int, default=50004)
    p.add_argument("--embed-dim", type=int, default=320)
    p.add_argument("--hidden-size", type=int, default=512)
    p.add_argument("--num-layers", type=int, default=5)
    p.add_argument("--decoder-hidden-size", type=int, default=2048)
    args = p.parse_args(argv)
    from hf_laser.speed.cpu import cpu_info  # (every speed figure names its processor)

    print(f"# processor: {cpu_info().line()}", flush=True)

    torch.manual_seed(0)
    device = torch.device(args.device)
    config = LaserConfig(vocab_size=args.vocab_size, embed_dim=args.embed_dim, hidden_size=args.hidden_size,
                         num_layers=args.num_layers, decoder_embed_dim=args.embed_dim,
                         decoder_hidden_size=args.decoder_hidden_size, target_languages=["en", "es"])
    model = LaserForPreTraining(config).to(device).train()
    n_params = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.98))
    forward = torch.compile(model) if args.compile else model
    batch_size = args.max_tokens // args.length
    gen = torch.Generator().manual_seed(0)

    def batch():
        src = torch.randint(4, args.vocab_size, (batch_size, args.length), generator=gen)
        tgt = torch.randint(4, args.vocab_size, (batch_size, args.length), generator=gen)
        src[:, -1] = tgt[:, -1] = config.eos_token_id
        return {"input_ids": src.to(device), "labels": tgt.to(device),
                "target_lang_ids": torch.randint(0, 2, (batch_size,), generator=gen).to(device)}

    dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    scaler = torch.amp.GradScaler(device.type, enabled=args.dtype == "fp16")
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    for step in range(args.warmup + args.steps):
        inputs = batch()
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            loss = forward(**inputs).loss
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
    step_s = statistics.median(times)
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated() / 2**30
        hardware = torch.cuda.get_device_name()
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB (Linux)
        hardware = f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads"
    print(json.dumps({
        "device": args.device, "hardware": hardware, "dtype": args.dtype, "compile": args.compile,
        "parameters": n_params, "batch": f"{batch_size} x {args.length} tokens per side",
        "step_s": round(step_s, 4), "tgt_tokens_per_s": round(batch_size * args.length / step_s, 1),
        "peak_memory_gib": round(peak, 2), "loss": round(float(loss.detach()), 4), "torch": torch.__version__,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
