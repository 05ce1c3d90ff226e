"""The importers' fast token counter (tokenizers + jinja2, no transformers)
counts exactly as transformers' tokenizer and chat template do, on every
text and chat of the bundled pool, so content notes keep their exact counts."""

from __future__ import annotations

from specdec.traffic.importers.tokens import FastTokenCounter, counter_for
from specdec.traffic.prompt_pool import HFTokenCounter, load_pool, split_units


def test_fast_counts_equal_transformers_counts(model_dir):
    fast, slow = FastTokenCounter(model_dir), HFTokenCounter(model_dir)
    pool = load_pool()
    texts = [p.text for p in pool.prompts] + [u.text for piece in pool.pieces[:10] for u in split_units(piece, slow)]
    assert [fast.text(t) for t in texts] == [slow.text(t) for t in texts]
    chats = [[{"role": "user", "content": p.text}] for p in pool.prompts]
    chats.append(
        [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "b"},
            {"role": "user", "content": pool.pieces[0].text},
        ]
    )
    chats.append([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}])
    assert [fast.chat(c) for c in chats] == [slow.chat(c) for c in chats]


def test_a_folder_with_tokenizer_json_and_a_template_gets_the_fast_counter(model_dir):
    assert isinstance(counter_for(model_dir), FastTokenCounter)
