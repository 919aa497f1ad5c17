"""One module per model family whose layout the generic decoder rules cannot express: its layer
kinds, KV heads per layer and parameter count, with the vLLM model file it follows cited.

Modules: nemotron_nas.py (Llama-3.x-Nemotron Super/Ultra: per-block `block_configs`).
"""
