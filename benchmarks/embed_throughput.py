"""Embedding throughput: hf_laser vs the original LASER encoding algorithm, on real Tatoeba text.

A full-size LASER checkpoint (5 x 512 BiLSTM, 320-d embeddings, the 63,021-entry reference dictionary) is built
deterministically with random weights in the original file format, converted with `hf-laser convert`, and both
implementations embed the same raw Tatoeba sentences with the same weights:

- **original**: the algorithm of LASER's `SentenceEncoder` re-implemented from its description: whitespace split of
  the BPE line, dictionary lookup token by token into a tensor, `</s>` appended, sentences sorted by length
  (descending, quicksort), batches of at most 12,000 real tokens, left padding converted to right padding,
  `pack_padded_sequence`, BiLSTM from zero states, padded positions set to -inf, max over time. Like the original it
  leaves autograd on (it only detaches the result), which costs time and memory on CPU.
  **original-nograd** is the same under `torch.no_grad()`: the original's kernels and batches without that overhead.
  Preprocessing for both is hf_laser's tokenizer in one process (identical output to the Perl + fastBPE pipeline,
  which ran at ~5,000 sentences/s on this kind of machine per ../shared/reference/README.md).
- **hf_laser**: `LaserEncoder.encode(raw_text, lang)`.

Each variant runs in a fresh process so that its peak RSS (and, on a GPU, its peak GPU memory) is its own.

On a GPU (`--device cuda`) both run on cuDNN's LSTM: the original moves each padded batch to the device like its
`SentenceEncoder` does (`.cuda()`), hf_laser runs `encode` with the model on the device; the modes are fp32, bf16
and fp16 (int8 is CPU-only). The differences are then measured against hf_laser fp32 on the CPU (`cpu-reference`):
the original's LSTM call gets PyTorch's default for cuDNN RNNs, TF32, while hf_laser keeps fp32 exact.
`--corpus-langs` adds an end-to-end row per mode for `encode_file` on the LibreOffice text of those languages
(../shared/data/parallel/train/libreoffice, ~16.8k non-empty lines each: 7 languages give 100k+ sentences), the
preprocessing of the next chunk in `--num-proc` worker processes while the device embeds this one.
Usage::

    python benchmarks/embed_throughput.py [--langs fra,deu,rus,cmn] [--lines 1000] [--modes fp32,int8,bf16]
    python benchmarks/embed_throughput.py --device cuda [--modes fp32,bf16,fp16] \
        [--corpus-langs de,fr,es,ru,it,pt,nl --num-proc 8]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
REFERENCE = SHARED / "reference"
TATOEBA = SHARED / "data" / "tatoeba" / "v1"
LIBREOFFICE = SHARED / "data" / "parallel" / "train" / "libreoffice"
CACHE = REPO / ".cache" / "benchmarks"


def tatoeba_lang(iso3: str) -> str:
    table = dict(line.split("\t") for line in (REFERENCE / "tatoeba_langs.tsv").read_text().split("\n")[1:] if line)
    return table[iso3]


def build_full_size_model() -> Path:
    """Random-weight 5x512 LASER checkpoint in the original format, converted with `hf-laser convert` (cached)."""
    out = CACHE / "laser-fullsize-random-v2"
    if (out / "model.safetensors").exists():
        return out
    CACHE.mkdir(parents=True, exist_ok=True)
    vocab = [line.split(" ")[0] for line in (REFERENCE / "bpe" / "laser-ref.fvocab").read_text("utf-8").split("\n") if line]
    dictionary = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for token in vocab:
        dictionary.setdefault(token, len(dictionary))
    params = dict(num_embeddings=len(dictionary), padding_idx=1, embed_dim=320, hidden_size=512, num_layers=5,
                  bidirectional=True, left_pad=True, padding_value=0.0)
    # PyTorch's own initialisation (LSTM weights U(-1/sqrt(512), 1/sqrt(512)), embeddings N(0, 1)) keeps the
    # recurrence contractive like a trained encoder. With N(0, 0.1) weights at this size it is chaotic: float32
    # rounding grows over time steps, and the original algorithm then differs from itself by ~2e-5 when only the
    # batch composition changes (measured), so no fp32 implementation could be compared at 1e-5.
    torch.manual_seed(1234)
    embed = torch.nn.Embedding(len(dictionary), 320, padding_idx=1)
    lstm = torch.nn.LSTM(320, 512, num_layers=5, bidirectional=True)
    state = {f"embed_tokens.{k}": v for k, v in embed.state_dict().items()}
    state.update({f"lstm.{k}": v for k, v in lstm.state_dict().items()})
    checkpoint = CACHE / "laser-fullsize-random-v2.pt"
    torch.save({"params": params, "model": state, "dictionary": dictionary}, checkpoint)
    subprocess.run([sys.executable, "-m", "hf_laser.cli", "convert", str(checkpoint), str(out),
                    "--bpe-codes", str(REFERENCE / "bpe" / "laser-ref.fcodes"),
                    "--bpe-vocab", str(REFERENCE / "bpe" / "laser-ref.fvocab")], check=True)
    return out


class OriginalLaserEncoder:
    """LASER's `SentenceEncoder` + `LaserLstmEncoder` algorithm (see module docstring), same weights."""

    def __init__(self, model_dir: Path, max_tokens: int = 12000, autograd: bool = True, device: str = "cpu"):
        from hf_laser import LaserModel

        model = LaserModel.from_pretrained(model_dir).eval().to(device)
        self.device = torch.device(device)
        self.embed_tokens, self.lstm = model.embed_tokens, model.lstm
        self.lstm.batch_first = False  # the original runs time-major
        self.max_tokens = max_tokens
        self.autograd = autograd
        self.dictionary = json.loads((model_dir / "vocab.json").read_text("utf-8"))

    def _tokenize(self, line: str) -> torch.Tensor:
        words = line.strip().split()
        ids = torch.LongTensor(len(words) + 1)
        for i, word in enumerate(words):
            ids[i] = self.dictionary.get(word, 3)
        ids[len(words)] = 2
        return ids

    def _batches(self, lines):
        tokens = [self._tokenize(line) for line in lines]
        lengths = np.array([t.numel() for t in tokens])
        indices = np.argsort(-lengths, kind="quicksort")
        batch, ntokens = [], 0
        for i in indices:
            if batch and ntokens + lengths[i] > self.max_tokens:
                yield batch, tokens, lengths
                batch, ntokens = [], 0
            batch.append(i)
            ntokens += lengths[i]
        if batch:
            yield batch, tokens, lengths

    def encode_bpe(self, bpe_lines: list[str]) -> np.ndarray:
        with torch.set_grad_enabled(self.autograd):
            return self._encode_bpe(bpe_lines)

    def _encode_bpe(self, bpe_lines: list[str]) -> np.ndarray:
        out = np.zeros((len(bpe_lines), 2 * self.lstm.hidden_size), np.float32)
        for batch, tokens, lengths in self._batches(bpe_lines):
            width = lengths[batch[0]]
            src = torch.full((len(batch), width), 1, dtype=torch.long)
            for j, i in enumerate(batch):  # left padding, as the original batches are built
                src[j, width - lengths[i]:] = tokens[i]
            # ... which its encoder converts back to right padding: roll each row left by its number of pads
            n_pads = src.eq(1).sum(1, keepdim=True)
            src = src.gather(1, (torch.arange(width)[None, :] + n_pads) % width).to(self.device)
            x = self.embed_tokens(src).transpose(0, 1)
            packed = torch.nn.utils.rnn.pack_padded_sequence(x, torch.as_tensor(lengths[batch]))
            h, _ = self.lstm(packed)
            h, _ = torch.nn.utils.rnn.pad_packed_sequence(h, padding_value=0.0)
            mask = src.eq(1).t()
            if mask.any():
                h = h.float().masked_fill_(mask.unsqueeze(-1), float("-inf"))
            out[batch] = h.max(dim=0)[0].detach().cpu().numpy()
        return out


def load_inputs(langs: list[str], n_lines: int):
    from hf_laser.encoder import read_lines

    inputs = []
    for iso3 in langs:
        lines = list(read_lines(TATOEBA / f"tatoeba.{iso3}-eng.{iso3}"))[:n_lines]
        inputs.append((iso3, tatoeba_lang(iso3), lines))
    return inputs


def corpus_files(langs: list[str], max_lines: int | None) -> list[tuple[str, Path]]:
    """The non-empty LibreOffice lines of each language (the first `max_lines`) as a plain text file."""
    import gzip

    out = []
    for lang in langs:
        path = CACHE / "corpus" / f"libreoffice.{lang}.{max_lines or 'all'}.txt"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            with gzip.open(LIBREOFFICE / f"{lang}.txt.gz", "rt", encoding="utf-8", newline="\n") as f:
                lines = [line for line in f.read().split("\n") if line.strip()][:max_lines]
            path.write_text("".join(line + "\n" for line in lines), encoding="utf-8", newline="\n")
        out.append((lang, path))
    return out


def synchronize(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def run_variant(variant: str, model_dir: Path, langs: list[str], n_lines: int, out_npy: Path, device: str,
                corpus_langs: list[str], corpus_lines: int | None, num_proc: int) -> dict:
    """Runs in its own process; returns timings, peak memory, and saves the embeddings for comparison."""
    from hf_laser import LaserEncoder

    inputs = load_inputs(langs, n_lines)
    n_sent = sum(len(lines) for _, _, lines in inputs)
    if variant == "cpu-reference":
        variant, device, corpus_langs = "fp32", "cpu", []
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16}
    encoder = LaserEncoder.from_pretrained(model_dir, dtype=dtypes.get(variant), device=device,
                                           quantize="int8" if variant == "int8" else None)
    tokenizer = encoder.tokenizer
    # warm-up: tokenizer caches (jieba/MeCab dictionaries), kernels and cuDNN plans, outside the timed region
    for _, lang, lines in inputs:
        tokenizer.encode_lines(lines[:20], lang=lang)
    encoder.encode(inputs[0][2][:200], lang=inputs[0][1])
    if torch.device(device).type == "cuda":
        torch.cuda.reset_peak_memory_stats()

    result = {"variant": variant, "sentences": n_sent, "threads": torch.get_num_threads(), "device": device}
    t0 = time.perf_counter()
    if variant.startswith("original"):
        original = OriginalLaserEncoder(model_dir, autograd=variant == "original", device=device)
        original.encode_bpe(["a b"] * 4)
        t0 = time.perf_counter()
        bpe = [(tokenizer.pipeline.subword_lines(tokenizer.pipeline.preprocess(lines, lang))) for _, lang, lines in inputs]
        t1 = time.perf_counter()
        emb = np.concatenate([original.encode_bpe(lines) for lines in bpe])
        t2 = time.perf_counter()
        tokens = sum(len(line.split()) + 1 for lines in bpe for line in lines)
        # the original's own sensitivity to batch composition: one sentence per batch, first 200 sentences
        original.max_tokens = 1
        result["self_noise"] = float(np.abs(original.encode_bpe(bpe[0][:200]) - emb[:min(200, len(bpe[0]))]).max())
    else:
        ids = [tokenizer.encode_lines(lines, lang=lang) for _, lang, lines in inputs]
        t1 = time.perf_counter()
        emb = np.concatenate([encoder.encode_ids(x).numpy() for x in ids])  # returns on the CPU: synchronised
        t2 = time.perf_counter()
        # end to end through the public API, timed separately
        t3 = time.perf_counter()
        for _, lang, lines in inputs:
            encoder.encode(lines, lang=lang)
        result["e2e_api_s"] = time.perf_counter() - t3
        tokens = sum(len(s) for x in ids for s in x)
        if corpus_langs:
            files = corpus_files(corpus_langs, corpus_lines)
            lines = 0
            t4 = time.perf_counter()
            for lang, path in files:
                out = CACHE / "corpus" / f"emb-{variant}.{lang}.npy"
                lines += len(encoder.encode_file(path, out, lang=lang, resume=False, num_proc=num_proc,
                                                 show_progress_bar=False))
            synchronize(device)
            result.update(corpus_s=time.perf_counter() - t4, corpus_lines=lines)
    result.update(tokenize_s=t1 - t0, encode_s=t2 - t1, tokens=tokens,
                  peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    if torch.device(device).type == "cuda":
        result["peak_gpu_mb"] = torch.cuda.max_memory_allocated() / 2**20
        result["gpu"] = torch.cuda.get_device_name()
    np.save(out_npy, emb)
    return result



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--langs", default="fra,deu,rus,cmn")
    parser.add_argument("--lines", type=int, default=1000, help="lines per language file")
    parser.add_argument("--modes", help="hf_laser variants besides the original (default: fp32,int8,bf16 on CPU, "
                                        "fp32,bf16,fp16 on a GPU)")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda: where both encoders run")
    parser.add_argument("--corpus-langs", default="",
                        help="also time encode_file end to end on the LibreOffice text of these languages")
    parser.add_argument("--corpus-lines", type=int, help="at most this many lines per --corpus-langs language")
    parser.add_argument("--num-proc", type=int, default=1, help="tokenizer worker processes for --corpus-langs")
    parser.add_argument("--_variant", help=argparse.SUPPRESS)
    parser.add_argument("--_out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    from hf_laser.speed.cpu import cpu_info  # (every speed figure names its processor)

    print(f"# processor: {cpu_info().line()}", flush=True)
    if not SHARED.exists():
        sys.exit(f"needs {SHARED} (Tatoeba text and the reference BPE files)")
    on_gpu = torch.device(args.device).type != "cpu"
    if on_gpu and not torch.cuda.is_available():
        sys.exit(f"--device {args.device}, but torch sees no CUDA device")
    modes = (args.modes or ("fp32,bf16,fp16" if on_gpu else "fp32,int8,bf16")).split(",")
    unknown = set(modes) - {"fp32", "int8", "bf16", "fp16"}
    if unknown:
        sys.exit(f"unknown --modes {sorted(unknown)}: fp32, int8, bf16, fp16")
    if on_gpu and "int8" in modes:
        sys.exit("int8 (dynamic quantisation) runs on the CPU only: leave it out of --modes with --device cuda")
    langs = args.langs.split(",")
    corpus_langs = [x for x in args.corpus_langs.split(",") if x]
    missing = [x for x in corpus_langs if not (LIBREOFFICE / f"{x}.txt.gz").exists()]
    if missing:
        sys.exit(f"no LibreOffice text for {missing} in {LIBREOFFICE}")
    model_dir = build_full_size_model()
    if args._variant:
        print(json.dumps(run_variant(args._variant, model_dir, langs, args.lines, Path(args._out), args.device,
                                     corpus_langs, args.corpus_lines, args.num_proc)))
        return

    results = {}
    for variant in ["cpu-reference"] * on_gpu + ["original", "original-nograd", *modes]:
        npy = CACHE / f"emb-{variant}.npy"
        proc = subprocess.run([sys.executable, __file__, "--langs", args.langs, "--lines", str(args.lines),
                               "--device", args.device, "--corpus-langs", args.corpus_langs,
                               *(["--corpus-lines", str(args.corpus_lines)] if args.corpus_lines else []),
                               "--num-proc", str(args.num_proc), "--_variant", variant, "--_out", str(npy)],
                              capture_output=True, text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        if proc.returncode:
            sys.exit(f"{variant} failed:\n{proc.stderr[-3000:]}")
        results[variant] = json.loads(proc.stdout.strip().splitlines()[-1])
        results[variant]["emb"] = np.load(npy)

    ref_name = "cpu-reference" if on_gpu else "original"
    ref = results[ref_name]["emb"]
    o = results["original"]
    o_total = o["tokenize_s"] + o["encode_s"]
    where = o.get("gpu", f"CPU, torch threads {o['threads']}")
    print(f"model: {model_dir.name} (5x512 BiLSTM, random weights), text: Tatoeba {args.langs} x {args.lines} lines "
          f"= {o['sentences']} sentences, {o['tokens']} tokens; {where}; torch {torch.__version__}")
    print(f"original vs itself with one sentence per batch (its batch-composition noise): "
          f"max abs diff {o['self_noise']:.2e}")
    memory = "peak GPU MB" if on_gpu else "peak RSS MB"
    print("| variant | encoder sent/s | encoder tok/s | end-to-end sent/s | e2e via encode() sent/s | "
          f"e2e speed-up | max abs diff vs {ref_name} | mean cosine | {memory} |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        total = r["tokenize_s"] + r["encode_s"]
        emb = r["emb"]
        cos = np.sum(emb * ref, 1) / (np.linalg.norm(emb, axis=1) * np.linalg.norm(ref, axis=1))
        api = f"{r['sentences'] / r['e2e_api_s']:.1f}" if "e2e_api_s" in r else "-"
        peak = r.get("peak_gpu_mb") if on_gpu else r["peak_rss_mb"]
        peak = "(CPU)" if peak is None else f"{peak:.0f}"
        print(f"| {name} | {r['sentences'] / r['encode_s']:.1f} | {r['tokens'] / r['encode_s']:.0f} | "
              f"{r['sentences'] / total:.1f} | {api} | {o_total / total:.2f}x | "
              f"{np.abs(emb - ref).max():.2e} | {cos.mean():.6f} | {peak} |")
    if corpus_langs:
        print(f"\nencode_file end to end, LibreOffice {args.corpus_langs}, {args.num_proc} tokenizer process(es):")
        print("| variant | lines | seconds | sentences/s |")
        print("|---|---|---|---|")
        for name, r in results.items():
            if "corpus_s" in r:
                lines, secs = r["corpus_lines"], r["corpus_s"]
                print(f"| {name} | {lines:,} | {secs:.1f} | {lines / secs:.0f} |")


if __name__ == "__main__":
    main()
