"""How close the LASER encoder runs to this machine's matrix-product ceiling (the bound on any exact fp32 speed-up).

The 5 x 512 BiLSTM costs 57.2 MFLOP per token, almost all of it in matrix products: per layer and direction, the
input projection of all time steps (one large product) and the recurrent product of every step. This script times,
for one batch of the shape the encoder sees (B sentences x T tokens, random weights):

- plain matrix products (`torch.matmul`) in fp32 and bf16, the machine's practical ceilings;
- the LSTM as PyTorch runs it: padded (one fused oneDNN call) and packed (what the original does);
- the same LSTM's matrix products alone, without gates or any other work: the time an exact fp32 LSTM cannot beat
  with these kernels;
- int8 (CPU): the same product as PyTorch's dynamic int8 linear layer runs it (fbgemm; the activations quantised at
  every call, as `quantize="int8"` does), and the LSTM quantised the same way, padded and packed: the int8 mode's
  ceiling and how close its LSTM comes to it;
- fp32 products split into bf16 parts (x = x1 + x2 + x3, each exactly a bf16 number) so that the AMX units do them
  with fp32 accumulation (oneDNN's bf16 math mode): 3 partial products (x1w1 + x1w2 + x2w1) or 6 (all with
  combined weight down to 2^-16), their error against float64 next to plain fp32's, and their effective speed.

On a GPU (`--device cuda`) the same rows run on cuBLAS and cuDNN: products in fp32 (TF32 off), TF32, bf16 and
fp16; the LSTM (cuDNN, padded and packed) and its products alone in fp32 and bf16, each timed between device
synchronisations. The bf16-split rows are CPU-only (they are about AMX).

Usage::

    python benchmarks/lstm_ceiling.py [--batch 800] [--length 15] [--threads N]
    python benchmarks/lstm_ceiling.py --device cuda
"""

from __future__ import annotations

import argparse
import time

import torch

FLOP_PER_TOKEN = 2 * 2 * (4 * 512 * (320 + 512) + 4 * 4 * 512 * (1024 + 512))  # 2 FLOP x 2 directions x weights


def synchronize() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def seconds(fn, repeat: int) -> float:
    fn()  # warm-up: oneDNN primitive creation / cuDNN plans, allocator
    synchronize()
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    synchronize()
    return (time.perf_counter() - start) / repeat


def bf16_split_products(a: torch.Tensor, b: torch.Tensor, repeat: int) -> None:
    def split(x):
        parts = []
        for _ in range(3):
            parts.append(x.bfloat16().float())
            x = x - parts[-1]
        return parts

    b = b * 0.03  # weight scale of a trained or default-initialised LSTM: products of order 1
    exact = a.double() @ b.double()
    (a1, a2, a3), (b1, b2, b3) = split(a), split(b)
    flop = 2 * a.shape[0] * a.shape[1] * b.shape[1]
    print(f"fp32 matmul: max error {(a @ b - exact).abs().max():.1e} (speed above)")
    backend = torch.backends.mkldnn.matmul
    previous = backend.fp32_precision
    backend.fp32_precision = "bf16"  # fp32 in and out, bf16 products with fp32 accumulation on AMX
    try:
        variants = {
            "3 bf16 products": lambda: a1 @ b1 + (a1 @ b2 + a2 @ b1),
            "6 bf16 products": lambda: a1 @ b1 + (a1 @ b2 + a2 @ b1) + (a1 @ b3 + a2 @ b2 + a3 @ b1),
        }
        for name, fn in variants.items():
            t = seconds(fn, 5 * repeat)
            print(f"fp32 as {name}: max error {(fn() - exact).abs().max():.1e}, "
                  f"{flop / t / 1e9:.0f} effective GFLOP/s")
    finally:
        backend.fp32_precision = previous


def lstm_rows(B: int, T: int, repeat: int, device: str, dtype: torch.dtype) -> list[tuple[str, int, float]]:
    """The LSTM padded, packed, and its matrix products alone, on `device` in `dtype`."""
    kw = dict(device=device, dtype=torch.float32 if dtype == torch.qint8 else dtype)
    lstm = torch.nn.LSTM(320, 512, num_layers=5, bidirectional=True).eval().to(**kw)
    x = torch.randn(T, B, 320, **kw)
    lengths = torch.randint(max(1, T - 3), T + 1, (B,)).sort(descending=True).values
    lengths[0] = T
    packed = torch.nn.utils.rnn.pack_padded_sequence(x, lengths)
    weights = [(getattr(lstm, f"weight_ih_l{layer}{sfx}").t().contiguous(),
                getattr(lstm, f"weight_hh_l{layer}{sfx}").t().contiguous())
               for layer in range(5) for sfx in ("", "_reverse")]
    layer_inputs = [torch.randn(T * B, 320, **kw)] + [torch.randn(T * B, 1024, **kw)] * 4

    def matmuls_only():
        h = torch.zeros(B, 512, **kw)
        for k, (w_ih, w_hh) in enumerate(weights):
            layer_inputs[k // 2] @ w_ih
            for _ in range(T):
                h @ w_hh

    kernel = "cuDNN" if torch.device(device).type == "cuda" else "oneDNN"
    name = str(dtype).split(".")[-1]
    if dtype == torch.qint8:  # dynamic int8, as LaserEncoder.from_pretrained(quantize="int8") makes it
        lstm = torch.ao.quantization.quantize_dynamic(lstm, {torch.nn.LSTM}, dtype=torch.qint8)
        kernel, name = "fbgemm", "int8"
        with torch.inference_mode():
            return [(f"LSTM {name} padded ({kernel})", B * T, seconds(lambda: lstm(x), repeat)),
                    (f"LSTM {name} packed (hf_laser's call)", int(lengths.sum()), seconds(lambda: lstm(packed), repeat))]
    with torch.inference_mode():
        return [(f"LSTM {name} padded (fused {kernel})", B * T, seconds(lambda: lstm(x), repeat)),
                (f"LSTM {name} packed (the original's call)", int(lengths.sum()),
                 seconds(lambda: lstm(packed), repeat)),
                (f"its {name} matrix products alone (bound)", B * T, seconds(matmuls_only, repeat))]



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=800, help="sentences per batch (12k-token budget / ~15 tokens)")
    parser.add_argument("--length", type=int, default=15, help="tokens of the longest sentence")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    args = parser.parse_args()
    from hf_laser.speed.cpu import cpu_info  # (every speed figure names its processor)

    print(f"# processor: {cpu_info().line()}", flush=True)
    if args.threads:
        torch.set_num_threads(args.threads)
    on_gpu = torch.device(args.device).type == "cuda"
    if on_gpu and not torch.cuda.is_available():
        raise SystemExit(f"--device {args.device}, but torch sees no CUDA device")
    torch.manual_seed(0)
    B, T = args.batch, args.length
    where = torch.cuda.get_device_name(args.device) if on_gpu else f"{torch.get_num_threads()} threads"
    print(f"torch {torch.__version__}, {where}, batch {B} x {T} tokens, {FLOP_PER_TOKEN / 1e6:.1f} MFLOP/token")

    repeat = args.repeat * (10 if on_gpu else 1)  # GPU calls are short: more of them for a stable mean
    a, b = torch.randn(B * T, 1024, device=args.device), torch.randn(1024, 2048, device=args.device)
    flop = 2 * a.shape[0] * 1024 * 2048
    variants = [("fp32", torch.float32, "ieee"), ("tf32", torch.float32, "tf32"), ("bf16", torch.bfloat16, None),
                ("fp16", torch.float16, None)] if on_gpu else [("fp32", torch.float32, None),
                                                                ("bf16", torch.bfloat16, None)]
    for name, dtype, precision in variants:
        if not on_gpu and dtype == torch.bfloat16 and not cpu_info().native("bf16"):
            print(f"matmul {B * T}x1024 @ 1024x2048 bf16: skipped (emulated on this CPU: minutes per product)")
            continue
        x, w = a.to(dtype), b.to(dtype)
        if precision:
            torch.backends.cuda.matmul.fp32_precision = precision
        t = seconds(lambda: x @ w, 10 * repeat)
        print(f"matmul {B * T}x1024 @ 1024x2048 {name}: {flop / t / 1e9:.0f} GFLOP/s")
    if on_gpu:
        torch.backends.cuda.matmul.fp32_precision = "ieee"
        torch.backends.cudnn.conv.fp32_precision = "ieee"
    else:
        linear = torch.nn.Linear(1024, 2048, bias=False)
        linear.weight.data = b.t().contiguous()
        int8 = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(linear), {torch.nn.Linear},
                                                      dtype=torch.qint8)
        with torch.inference_mode():
            exact = a.double() @ b.double()
            error = float((int8(a) - exact).norm() / exact.norm())
            t = seconds(lambda: int8(a), 10 * repeat)
        print(f"matmul {B * T}x1024 @ 1024x2048 int8 (fbgemm dynamic linear, activations quantised per call): "
              f"{flop / t / 1e9:.0f} GOP/s, relative error {error:.1e} (random normal operands)")
        if cpu_info().native("bf16"):
            bf16_split_products(a, b, args.repeat)
        else:  # (minutes of emulated bf16 for rows that are about AMX)
            print("fp32 as bf16 parts: skipped (this CPU has no native bf16)")

    rows = lstm_rows(B, T, repeat, args.device, torch.float32)
    rows += lstm_rows(B, T, repeat, args.device, torch.bfloat16 if on_gpu else torch.qint8)
    for name, tokens, t in rows:
        print(f"{name}: {tokens / t:.0f} tokens/s, {tokens * FLOP_PER_TOKEN / t / 1e9:.0f} GFLOP/s")


if __name__ == "__main__":
    main()
