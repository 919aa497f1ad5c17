"""What a model and a GPU are, read from configs and catalogs; pure Python, never torch.

Modules: model.py (`ModelSpec`), config_schema.py (the config.json schema), cache/ (one class per
cache kind, each owning its bytes), layer.py (`Layer`: a layer's caches), layers.py (which cache
each decoder layer holds, from the config), state.py (the recurrent state of Mamba / linear-attention
layers from the config), params.py
(exact parameter counts), mixer_params.py, encoder_params.py, gemma3n_params.py, gemma4_params.py,
longcat_params.py (family-specific counts), quant.py (weight quantization), checkpoint_quant.py and
modelopt_quant.py (a checkpoint's own scheme, ModelOpt's and its KV cache), quant_exclusions.py
(modules a checkpoint leaves unconverted), config_keys.py
(config keys read, irrelevant, or named in a warning), checked_types.py (model types checked against
transformers or by hand; any other is warned), families/ (one module per family), dtypes.py,
checkpoint.py (weight bytes of a local checkpoint), hub.py (Hugging Face repo ids), profiles.py
(the bundled catalog), gpu.py (`GpuSpec` and the GPU catalog), prices.py (GPU list prices per hour),
catalog_files.py (where data
lives), words.py (token ids as words, for the HTTP client and `kvplan serve`).
May import files, validation, errors and units only.
"""
