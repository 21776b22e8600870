"""hf_laser: LASER sentence embeddings as a Hugging Face transformers model.

Importing the package registers the `laser` model type with the transformers Auto classes.
"""

from transformers import AutoConfig, AutoModel

from .configuration_laser import LaserConfig
from .modeling_laser import LaserModel, LaserPreTrainedModel

__version__ = "0.1.0"

AutoConfig.register("laser", LaserConfig, exist_ok=True)
AutoModel.register(LaserConfig, LaserModel, exist_ok=True)
# Saved directories carry the modeling code and an `auto_map`, so they load with `trust_remote_code=True`
# where hf_laser is not installed.
LaserConfig.register_for_auto_class()
LaserModel.register_for_auto_class("AutoModel")

__all__ = ["LaserConfig", "LaserModel", "LaserPreTrainedModel", "__version__"]
