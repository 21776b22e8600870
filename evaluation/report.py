"""Plots and the Markdown report of a `results.json` dict (tables: `hf_laser.checkpoints.hub.results_markdown`)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

__all__ = ["plot_results", "write_markdown"]


def _figure(n_bars: int):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    width = min(max(6.0, 0.16 * n_bars + 2.0), 30.0)
    return plt, plt.subplots(figsize=(width, 4.2))


def plot_results(results: dict, out_dir: str | Path, title: str = "") -> dict[str, str]:
    """Writes `tatoeba.png` (error per language, both directions, sorted), `xnli.png` and `mldoc.png` (accuracy per
    language) for the tasks present. Returns `{task: file name}`."""
    out_dir = Path(out_dir)
    written = {}
    tat = {k: v for k, v in results.get("tatoeba", {}).items() if k != "average"}
    if tat:
        langs = sorted(tat, key=lambda k: (tat[k]["xx2en_error"] + tat[k]["en2xx_error"], k))
        x = np.arange(len(langs))
        plt, (fig, ax) = _figure(2 * len(langs))
        ax.bar(x - 0.2, [tat[k]["xx2en_error"] for k in langs], 0.4, label="xx→en")
        ax.bar(x + 0.2, [tat[k]["en2xx_error"] for k in langs], 0.4, label="en→xx")
        avg = results["tatoeba"].get("average", {})
        if "xx2en_error" in avg:
            ax.axhline(avg["xx2en_error"], color="C0", ls="--", lw=0.8, label=f"avg xx→en {avg['xx2en_error']:.2f}")
            ax.axhline(avg["en2xx_error"], color="C1", ls=":", lw=0.8, label=f"avg en→xx {avg['en2xx_error']:.2f}")
        ax.set_xticks(x, langs, rotation=90, fontsize=7)
        ax.set_ylabel("error (%)")
        ax.set_ylim(0, 100)
        ax.set_xlim(-0.7, len(langs) - 0.3)
        ax.set_title(f"Tatoeba similarity search error{' — ' + title if title else ''}", pad=24)
        ax.legend(fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=4, frameon=False)
        fig.tight_layout()
        fig.savefig(out_dir / "tatoeba.png", dpi=110)
        plt.close(fig)
        written["tatoeba"] = "tatoeba.png"
    for task, chance, label in (("xnli", 100 / 3, "XNLI test accuracy (trained on English)"),
                                ("mldoc", 25.0, "MLDoc test accuracy (trained on English)")):
        data = {k: v for k, v in results.get(task, {}).items() if k != "average"}
        if not data:
            continue
        langs = list(data)
        keys = sorted({k for v in data.values() for k in v if re.fullmatch(r"accuracy(_\w+)?", k)},
                      key=lambda k: float(re.sub(r"\D", "", k) or 0))
        x = np.arange(len(langs))
        w = 0.8 / len(keys)
        plt, (fig, ax) = _figure(len(langs) * len(keys))
        for i, k in enumerate(keys):
            name = "accuracy" if k == "accuracy" else k[len("accuracy_"):] + " training docs"
            ax.bar(x - 0.4 + w * (i + 0.5), [data[lang].get(k, np.nan) for lang in langs], w, label=name)
        ax.axhline(chance, color="grey", ls=":", lw=0.8, label=f"chance {chance:.1f}")
        ax.set_xticks(x, langs)
        ax.set_ylabel("accuracy (%)")
        ax.set_ylim(0, 100)
        ax.set_title(label + (f" — {title}" if title else ""), pad=24)
        ax.legend(fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=5, frameon=False)
        fig.tight_layout()
        fig.savefig(out_dir / f"{task}.png", dpi=110)
        plt.close(fig)
        written[task] = f"{task}.png"
    return written


def write_markdown(results: dict, path: str | Path, *, plots: dict[str, str] | None = None, header: str = "") -> Path:
    from hf_laser.checkpoints.hub import results_markdown

    path = Path(path)
    text = (header.rstrip() + "\n\n" if header else "") + results_markdown(results, plots, heading_level=2) + "\n"
    path.write_text(text, encoding="utf-8")
    return path
