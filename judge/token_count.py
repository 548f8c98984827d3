"""Prompt tokens of a chat request counted before it is sent (`judge score --dry-run`), with the model's own tokenizer
where one can be loaded here, else estimated, and said which.

- the embedded model (a GGUF file): its vocabulary, merges and chat template read from the file (the `gguf`
  package) into a byte-level BPE (`tokenizers`), the template rendered as llama.cpp renders it; exact for the
  GPT-2-style vocabularies (the bundled SmolLM2), other vocabularies are estimated;
- a Hugging Face model folder (`--backend vllm`, or a server serving a local folder): its tokenizer.json and the
  chat template of tokenizer_config.json;
- a hosted OpenAI model: tiktoken's encoding for the model (with OpenAI's per-message overhead), when tiktoken
  can load it (it fetches the encoding once, then reads its cache);
- anything else: estimated at 4 characters a token (about right for English; a CJK text has more tokens).

These come with the `tokens` extra (pip install ".[tokens]"); without them every count is an estimate.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

CHARS_PER_TOKEN = 4.0
# OpenAI's chat format: a few tokens per message and three that prime the reply (their cookbook's count).
OPENAI_PER_MESSAGE, OPENAI_REPLY = 3, 3
SPECIAL_TYPES = (3, 4)  # GGUF token types CONTROL and USER_DEFINED: matched whole, never split


class Estimate:
    """Characters / 4, the chat roles included."""

    exact = False

    def __init__(self, why: str):
        self.how = f"estimated at {CHARS_PER_TOKEN:g} characters a token ({why})"

    def count(self, messages: list[dict]) -> int:
        chars = sum(len(m.get("content") or "") + len(m.get("role") or "") + 4 for m in messages)
        return round(chars / CHARS_PER_TOKEN)


class Templated:
    """A tokenizer (`tokenizers.Tokenizer`) and the model's chat template (Jinja, in a sandbox: it comes with a
    model file, not from this project)."""

    exact = True

    def __init__(self, tokenizer, template: str, specials: dict, how: str):
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        environment.globals["raise_exception"] = _raise
        self.template = environment.from_string(template)
        self.tokenizer, self.specials, self.how = tokenizer, specials, how

    def count(self, messages: list[dict]) -> int:
        text = self.template.render(messages=messages, add_generation_prompt=True, **self.specials)
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)


def _raise(message: str):
    raise ValueError(message)


def from_gguf(path: Path):
    """The tokenizer of a GGUF model file, or an Estimate saying why not."""
    try:
        import gguf
        from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    except ImportError:
        return Estimate('the gguf and tokenizers packages are not installed: pip install ".[tokens]"')
    fields = gguf.GGUFReader(str(path)).fields

    def value(name, default=None):
        return fields[name].contents() if name in fields else default

    if value("tokenizer.ggml.model") != "gpt2" or "tokenizer.chat_template" not in fields:
        return Estimate(f"{path.name}: its vocabulary ({value('tokenizer.ggml.model')}) is not a byte-level BPE")
    tokens, types = value("tokenizer.ggml.tokens"), value("tokenizer.ggml.token_type")
    merges = [tuple(m.split(" ", 1)) for m in value("tokenizer.ggml.merges")]
    tokenizer = Tokenizer(models.BPE({t: n for n, t in enumerate(tokens)}, merges))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                       pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False)
                                  for t, kind in zip(tokens, types) if kind in SPECIAL_TYPES])
    specials = {"bos_token": tokens[value("tokenizer.ggml.bos_token_id", 0)],
                "eos_token": tokens[value("tokenizer.ggml.eos_token_id", 0)]}
    return Templated(tokenizer, value("tokenizer.chat_template"), specials,
                     f"counted with {path.name}'s own vocabulary and chat template")


def from_folder(folder: Path):
    """The tokenizer of a Hugging Face model folder (tokenizer.json, tokenizer_config.json), or an Estimate."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return Estimate('the tokenizers package is not installed: pip install ".[tokens]"')
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8")) \
        if (folder / "tokenizer_config.json").is_file() else {}
    template = config.get("chat_template")
    if not template and (folder / "chat_template.jinja").is_file():
        template = (folder / "chat_template.jinja").read_text(encoding="utf-8")
    if not template:
        return Estimate(f"{folder} has no chat template")

    def token(name):
        found = config.get(name)
        return found.get("content") if isinstance(found, dict) else found or ""

    return Templated(Tokenizer.from_file(str(folder / "tokenizer.json")), template,
                     {"bos_token": token("bos_token"), "eos_token": token("eos_token")},
                     f"counted with {folder.name}'s own tokenizer and chat template")


class OpenAICount:
    """tiktoken's encoding for a hosted OpenAI model."""

    exact = True

    def __init__(self, encoding, model: str):
        self.encoding, self.how = encoding, f"counted with tiktoken's {encoding.name} (the encoding of {model})"

    def count(self, messages: list[dict]) -> int:
        return OPENAI_REPLY + sum(OPENAI_PER_MESSAGE + len(self.encoding.encode(m.get("content") or ""))
                                  + len(self.encoding.encode(m.get("role") or "")) for m in messages)


def for_model(backend: str, model: str | None):
    """The best counter for the run's model: its own tokenizer when it can be loaded here, else an Estimate."""
    if not model:
        return Estimate("no model named")
    path = Path(model)
    if backend == "local" or path.suffix == ".gguf":
        if path.is_file():
            return from_gguf(path)
    if path.is_dir() and (path / "tokenizer.json").is_file():
        return from_folder(path)
    try:
        import tiktoken
    except ImportError:
        return Estimate(f'{model}: no tokenizer here for it (tiktoken is not installed: pip install ".[tokens]")')
    if os.environ.get("JUDGE_OFFLINE") and "TIKTOKEN_CACHE_DIR" not in os.environ:
        # tiktoken would fetch its encoding file from the network; offline (the tests, an air-gapped cluster) it
        # is not even tried.
        return Estimate(f"{model}: JUDGE_OFFLINE is set, so tiktoken's encoding is not fetched (set "
                        "TIKTOKEN_CACHE_DIR to a folder holding it)")
    try:
        return OpenAICount(tiktoken.encoding_for_model(model), model)
    except KeyError:
        return Estimate(f"{model}: not a model tiktoken knows, and no tokenizer file for it here")
    except Exception as exc:  # noqa: BLE001 - tiktoken fetches its encoding files once; offline that fails
        reason = " ".join(str(exc).split())[:120]
        hint = "" if "TIKTOKEN_CACHE_DIR" in os.environ else "; set TIKTOKEN_CACHE_DIR to a folder holding it"
        return Estimate(f"{model}: tiktoken could not load its encoding ({reason}){hint}")
