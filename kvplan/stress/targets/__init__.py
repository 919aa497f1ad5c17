"""Load targets of `kvplan stress`: the in-process engine and any OpenAI-compatible HTTP server.

Modules: engine_target.py (the bundled engine), http_target.py (a server), openai_http.py and
openai_stream.py (requests and streamed answers), http1.py (the hot-path HTTP/1.1 client),
prompt_text.py (text prompts of exact length), server_features.py (what a server accepts),
server_settings.py (its pool, block size, KV dtype and max_model_len, read before the run),
target_url.py (the --target URL, checked before any of them reads it), workers.py (--workers: N
client processes, one merged run), profiler.py (--profile: the server's profiler around the run),
text_turns.py (conversations: later turns resend the history the server streamed).
"""
