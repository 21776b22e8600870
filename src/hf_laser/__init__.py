"""hf_laser: LASER sentence embeddings as a Hugging Face transformers model.

Importing the package registers the `laser` model type with the transformers Auto classes and the
`laser-sentence-embedding` pipeline.
"""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForPreTraining,
    AutoModelForSequenceClassification,
    AutoTokenizer,
)

from .configuration_laser import LaserConfig
from .modeling_laser import (
    LaserClassificationCollator,
    LaserClassificationHead,
    LaserForPreTraining,
    LaserForSequenceClassification,
    LaserModel,
    LaserPreTrainedModel,
)
from .tokenization_laser import LaserTokenizer
from .encoder import LaserEncoder
from .models import DEFAULT_MODEL
from . import pipelines  # noqa: F401  (registers the pipeline)

__version__ = "0.1.0"

AutoConfig.register("laser", LaserConfig, exist_ok=True)
AutoModel.register(LaserConfig, LaserModel, exist_ok=True)
AutoModelForPreTraining.register(LaserConfig, LaserForPreTraining, exist_ok=True)
AutoModelForSequenceClassification.register(LaserConfig, LaserForSequenceClassification, exist_ok=True)
AutoTokenizer.register(LaserConfig, tokenizer_class=LaserTokenizer, exist_ok=True)
# Saved directories carry the modeling code and an `auto_map`, so they load with `trust_remote_code=True`
# where hf_laser is not installed.
LaserConfig.register_for_auto_class()
LaserModel.register_for_auto_class("AutoModel")
LaserForSequenceClassification.register_for_auto_class("AutoModelForSequenceClassification")
LaserForPreTraining.register_for_auto_class("AutoModelForPreTraining")

__all__ = [
    "LaserConfig",
    "LaserModel",
    "LaserPreTrainedModel",
    "LaserForPreTraining",
    "LaserForSequenceClassification",
    "LaserClassificationHead",
    "LaserClassificationCollator",
    "LaserTokenizer",
    "LaserEncoder",
    "DEFAULT_MODEL",
    "__version__",
]
