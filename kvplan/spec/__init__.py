"""Model, GPU and dtype specifications (pure Python; never imports torch)."""
