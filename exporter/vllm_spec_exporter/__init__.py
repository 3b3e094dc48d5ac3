"""vllm-spec-exporter: is speculative decoding on this vLLM server paying off?"""

__version__ = "0.1.0"
