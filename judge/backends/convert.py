"""Turn a GGUF chat model into a Hugging Face folder that vLLM loads (recent vLLM no longer reads GGUF).

The bundled SmolLM2-135M-Instruct GGUF is the only small instruction-tuned model available offline; converted,
it lets `--backend vllm` and `vllm serve` run anywhere, tests included. transformers dequantises the GGUF
weights; its `save_pretrained` refuses a model that still says it is GGUF-quantised, so the weights move into a
plain model built from the same config. The chat template travels with the tokenizer.

The folder is converted once per GGUF content and kept in the user cache, keyed by the file's sha256:

    python -m judge.backends.convert [MODEL.gguf]     # prints the folder (default: the bundled SmolLM2)

Needs torch, transformers, gguf and accelerate (the `vllm` extra brings them).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import platformdirs

from judge.errors import BackendError
from judge.resources import file_sha256


def converted_dir(gguf: Path) -> Path:
    """Where the converted folder of this GGUF lives (whether or not it exists yet)."""
    cache = Path(platformdirs.user_cache_dir("llm-judge-rater")) / "hf-models"
    return cache / f"{gguf.stem}-{file_sha256(gguf)[:16]}"


def convert(gguf: Path, out: Path) -> None:
    """Write the Hugging Face model and tokenizer of `gguf` into the folder `out`."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is local; never wait on a hub
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError:
        raise BackendError("converting a GGUF model needs transformers, torch, gguf and accelerate: "
                           "pip install transformers torch gguf accelerate") from None
    quantised = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    config = quantised.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config)
    plain.load_state_dict(quantised.state_dict())
    plain.save_pretrained(out)
    tokenizer.save_pretrained(out)


def converted_model(gguf: Path | None = None) -> Path:
    """The Hugging Face folder of `gguf` (default: the bundled SmolLM2), converting it on first use."""
    if gguf is None:
        from judge.backends.local import bundled_model_path

        gguf = bundled_model_path()
    target = converted_dir(gguf)
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # Build beside the target and rename: a killed conversion leaves no half folder, and two at once both finish.
    scratch = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        convert(gguf, scratch)
        try:
            scratch.rename(target)
        except OSError:
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    gguf = Path(argv[0]) if argv else None
    if gguf is not None and not gguf.is_file():
        print(f"convert: error: {gguf}: no such GGUF file", file=sys.stderr)
        return 2
    try:
        print(converted_model(gguf))
    except BackendError as exc:
        print(f"convert: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
