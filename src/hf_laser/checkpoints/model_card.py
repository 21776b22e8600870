"""Model cards for exported LASER models, filled from the package's `model_card_template.md`."""

from __future__ import annotations

from pathlib import Path

from ..modeling.configuration_laser import LaserConfig

TEMPLATE = Path(__file__).with_name("model_card_template.md")


def render_model_card(config: LaserConfig, *, model_name: str = "LASER encoder", repo_id: str = "PATH_OR_REPO_ID",
                      base_model: str = "trained with hf_laser", tokenizer: str = "Moses + fastBPE (LASER1)",
                      license: str = "other", training: str | None = None, evaluation: str | None = None) -> str:
    """Returns the model card text (YAML metadata + Markdown) for a model with this config."""
    return TEMPLATE.read_text(encoding="utf-8").format(
        model_name=model_name, repo_id=repo_id, base_model=base_model, tokenizer=tokenizer, license=license,
        architecture=_architecture(config), encoder=_encoder(config),
        embedding_dim=config.embedding_dim, vocab_size=config.vocab_size,
        training=training or "Converted from an original LASER checkpoint; weights are unchanged.",
        evaluation=evaluation or "No evaluation results recorded yet (`python -m evaluation.run` adds them).",
    )


def _architecture(config) -> str:
    if getattr(config, "encoder_type", "bilstm") == "transformer":
        language = getattr(config, "language", None)
        pooled = "its output at `<s>`" if config.pooling == "cls" else "the max-pool over time of its outputs"
        return (f"A LASER3 student (Heffernan et al., 2022){' for ' + language if language else ''}: a transformer "
                f"encoder distilled from LASER2; the sentence embedding is {pooled}.")
    return ("One BiLSTM encoder is shared by all languages; the sentence\nembedding is the max-pool over time of its "
            "outputs.")


def _encoder(config) -> str:
    if getattr(config, "encoder_type", "bilstm") == "transformer":
        norm = "pre-norm" if config.normalize_before else "post-norm"
        return (f"{config.num_layers} × transformer layer ({norm}), width {config.embed_dim}, feed-forward "
                f"{config.ffn_dim}, {config.attention_heads} heads, {config.position_embedding_type} positions")
    return (f"{config.num_layers} × BiLSTM, {config.hidden_size} units per direction, {config.embed_dim}-d token "
            "embeddings")


def write_model_card(out_dir: str | Path, **kwargs) -> Path:
    """Writes `README.md` into a saved model directory (its `config.json` supplies the dimensions)."""
    out_dir = Path(out_dir)
    config = LaserConfig.from_pretrained(out_dir)
    kwargs.setdefault("model_name", out_dir.name)
    path = out_dir / "README.md"
    path.write_text(render_model_card(config, **kwargs), encoding="utf-8")
    return path
