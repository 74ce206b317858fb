"""The pure speculative engine: no terminal, no llama_cpp import."""
