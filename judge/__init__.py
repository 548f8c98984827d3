"""LLM-as-judge automated rater."""

__version__ = "0.1.0"
