"""What a model and a GPU are, read from configs and catalogs; pure Python, never torch.

Modules: model.py (`ModelSpec` and how a config.json becomes one), geometry.py (layers, hidden size,
heads), layers.py (which caches each decoder layer holds), layer.py (`Layer`), cache/ (one class per
cache kind, each owning its bytes), state.py (recurrent states from a config), params.py (exact
parameter counts of the generic decoder), mixer_params.py (state mixers), encoder_params.py (vision
and audio towers), vit.py (ViT dimensions), families/ (one module per model family and vision tower,
discovered: every rule that depends on the model type), checked_types.py (the warning for a model
type no family checked), config_schema.py (the config.json schema), config_section.py (a nested
block of it), config_keys.py (config keys read, irrelevant, or named in a warning), quant.py (weight
quantization), checkpoint_quant.py and modelopt_quant.py (a checkpoint's own scheme, ModelOpt's and
its KV cache), quant_exclusions.py (modules a checkpoint leaves unconverted), dtypes.py,
checkpoint.py (weight bytes of a local checkpoint), hub.py (Hugging Face repo ids), profiles.py (the
bundled catalog), gpu.py (`GpuSpec` and the GPU catalog), prices.py (GPU list prices per hour),
catalog_files.py (where data lives), words.py (token ids as words, for the HTTP client and `kvplan
serve`). May import files, validation, errors and units only.
"""
