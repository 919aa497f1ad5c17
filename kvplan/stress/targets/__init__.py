"""Load targets of `kvplan stress`: the in-process engine and any OpenAI-compatible HTTP server."""
