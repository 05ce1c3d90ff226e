"""Token counting for the importers without loading transformers.

``HFTokenCounter`` (``prompt_pool``) goes through transformers'
``AutoTokenizer``, whose import alone took 3-9 s of a whole-trace import on
this 2-core host (it imports torch). A model folder with ``tokenizer.json``
and a chat template holds everything counting needs: the Rust ``tokenizers``
library reads the first, jinja2 renders the second the way transformers
does (sandboxed, ``trim_blocks`` and ``lstrip_blocks``, ``raise_exception``
and ``tojson``, the special tokens of ``tokenizer_config.json`` as
variables). The counts are the same as ``HFTokenCounter``'s
(tests/traffic/importers/test_tokens.py checks it on the pool's texts and chats);
a folder without those files falls back to ``HFTokenCounter``.
"""

from __future__ import annotations

import json
from pathlib import Path


class FastTokenCounter:
    """Counts with ``tokenizers`` and the folder's chat template (see the module docstring)."""

    def __init__(self, model_dir: str | Path):
        from jinja2.sandbox import ImmutableSandboxedEnvironment
        from tokenizers import Tokenizer

        folder = Path(model_dir)
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
        template_file = folder / "chat_template.jinja"
        template = template_file.read_text(encoding="utf-8") if template_file.is_file() else config["chat_template"]
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.filters["tojson"] = lambda x, indent=None, **_: json.dumps(x, ensure_ascii=False, indent=indent)
        env.globals["raise_exception"] = _raise
        self.template = env.from_string(template)
        self.special = {k: v for k, v in config.items() if k.endswith("_token") and isinstance(v, str)}

    def text(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False))  # an Encoding's length: no list of ids made

    def chat(self, messages: list[dict]) -> int:
        rendered = self.template.render(messages=messages, add_generation_prompt=True, **self.special)
        return len(self.tokenizer.encode(rendered, add_special_tokens=False))


def _raise(message: str):
    raise ValueError(message)


def counter_for(model_dir: str | Path):
    """The fast counter when the folder allows it, else transformers'."""
    folder = Path(model_dir)
    has_template = (folder / "chat_template.jinja").is_file() or (
        (folder / "tokenizer_config.json").is_file()
        and "chat_template" in json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    )
    if (folder / "tokenizer.json").is_file() and (folder / "tokenizer_config.json").is_file() and has_template:
        return FastTokenCounter(folder)
    from specdec.traffic.prompt_pool import HFTokenCounter

    return HFTokenCounter(folder)
