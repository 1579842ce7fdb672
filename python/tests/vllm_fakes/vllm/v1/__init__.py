"""Test stand-in for vLLM (see python/tests/vllm_fakes/README.md)."""
