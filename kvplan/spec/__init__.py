"""What a model and a GPU are, read from configs and catalogs; pure Python, never torch.

Modules: model.py (`ModelSpec`), config_schema.py (the config.json schema), layers.py (what each
decoder layer caches), state.py (recurrent state of Mamba / linear-attention layers), params.py
(exact parameter counts), mixer_params.py, encoder_params.py, gemma3n_params.py, gemma4_params.py,
longcat_params.py (family-specific counts), quant.py (weight quantization), dtypes.py,
checkpoint.py (weight bytes of a local checkpoint), hub.py (Hugging Face repo ids), profiles.py
(the bundled catalog), gpu.py (`GpuSpec` and the GPU catalog), catalog_files.py (where data
lives), words.py (token ids as words, for the HTTP client and `kvplan serve`).
May import files, validation, errors and units only.
"""
