"""LLM-as-judge automated rater.

The Python API (pandas in and out; see judge/api.py): `judge.score`, `judge.compare`, `judge.read_judgments`,
`judge.judgments_frame`. Imported on first use, so `judge --help` stays fast.
"""

__version__ = "0.1.0"

_API = ("score", "compare", "read_judgments", "judgments_frame")
__all__ = ["__version__", *_API]


def __getattr__(name):
    if name in _API:
        from judge import api

        return getattr(api, name)
    raise AttributeError(f"module 'judge' has no attribute {name!r}")


def __dir__():
    return __all__
