"""``data prepare`` against Megatron-LM's own ``tools/preprocess_data.py`` (the pinned tag, from the upstream snapshot):
the same JSONL and GPT-2 BPE files give the same ``.bin`` and ``.idx``, byte for byte, whatever megaprov's workers and
chunks. preprocess_data.py runs with ``--legacy-tokenizer`` (its GPT2BPETokenizer; the new tokenizer system needs
transformers' AutoTokenizer) and ``--append-eod``, as megaprov's default.

It runs with one JSON key: with several, preprocess_data.py at this tag finalizes only the last key's builder (the
``finalize`` call sits after its loop over the keys), so the other keys get a .bin and no .idx. megaprov writes each
key's pair (test_data.py); here it reads two keys and its text dataset must still be upstream's.

One difference is by design: a document whose text is empty is, for preprocess_data.py, a document of no sequences
(its index repeats); megaprov leaves it out and counts it (``skipped_empty``). The corpus here has none, and the
second test pins the difference."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from megaprov.training import data
from megaprov.training.data import TokenizerSpec
from tests.fixtures import upstream

ROOT = Path(__file__).resolve().parents[3]
HELPER = ROOT / "tests" / "helpers" / "megatron_preprocess.py"
WORDS = "the cluster trains every node ünïcode ✓ tensor pipeline checkpoint data flows to a GPU, of and in".split()


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    return upstream.megatron_tree(tmp_path_factory)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A corpus of 600 documents under two keys (no empty text, and no blank line, which preprocess_data.py cannot
    read) and a byte-level BPE trained on it, saved as GPT-2's vocab.json and merges.txt."""
    import random

    tokenizers = pytest.importorskip("tokenizers")
    root = tmp_path_factory.mktemp("upstream-data")
    rng = random.Random(3)
    lines = []
    for i in range(600):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 400)))
        lines.append(json.dumps({"text": text, "title": f"Doc {i}: {rng.choice(WORDS)}"}, ensure_ascii=i % 2 == 0) + "\n")
    src = root / "corpus.jsonl"
    src.write_text("".join(lines))
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=600, special_tokens=["<|endoftext|>"], initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator([json.loads(line)["text"] for line in lines if line.strip()], trainer)
    tok.model.save(str(root))
    return src, root / "vocab.json", root / "merges.txt"


@pytest.fixture(scope="module")
def megatron_output(checkout, inputs, tmp_path_factory) -> Path:
    src, vocab, merges = inputs
    out = tmp_path_factory.mktemp("megatron-out") / "up"
    argv = [sys.executable, str(HELPER), str(checkout), "--input", str(src), "--output-prefix", str(out), "--json-keys", "text"]
    argv += ["--tokenizer-type", "GPT2BPETokenizer", "--legacy-tokenizer", "--vocab-file", str(vocab), "--merge-file", str(merges)]
    argv += ["--append-eod", "--workers", "1"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(checkout)})
    # a failure in its worker process still exits 0: the files are what says it worked
    assert proc.returncode == 0 and Path(f"{out}_text_document.idx").is_file(), proc.stderr[-3000:]
    return out


@pytest.mark.parametrize(("workers", "chunk"), [(1, data.CHUNK_BYTES), (2, 4096)])
def test_data_prepare_writes_what_megatron_lms_preprocess_data_writes(inputs, megatron_output, tmp_path, monkeypatch, workers, chunk):
    src, vocab, merges = inputs
    monkeypatch.setattr(data, "CHUNK_BYTES", chunk)  # 4 KiB: dozens of chunks, written in order from two workers
    spec = TokenizerSpec("gpt2-bpe", vocab_file=str(vocab), merge_file=str(merges))
    result = data.prepare([src], tmp_path / "mp", spec, json_keys=["text", "title"], workers=workers)
    assert result.progress.docs == 600 and result.progress.skipped_empty == 0
    for ext in (".bin", ".idx"):
        ours = Path(result.prefixes["text"] + ext).read_bytes()
        theirs = Path(f"{megatron_output}_text_document{ext}").read_bytes()
        assert ours == theirs, (ext, len(ours), len(theirs))


def test_an_empty_document_is_left_out_and_the_rest_is_upstreams(inputs, megatron_output, tmp_path):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    src, vocab, merges = inputs
    lines = src.read_text().splitlines(keepends=True)
    empty = tmp_path / "with-empty.jsonl"
    empty.write_text("".join(lines[:5]) + json.dumps({"text": "", "title": "nothing"}) + "\n" + "".join(lines[5:]))
    spec = TokenizerSpec("gpt2-bpe", vocab_file=str(vocab), merge_file=str(merges))
    result = data.prepare([empty], tmp_path / "mp", spec)
    assert (result.progress.docs, result.progress.skipped_empty) == (600, 1)
    ours, theirs = IndexedDataset(result.prefixes["text"]), IndexedDataset(f"{megatron_output}_text_document")
    assert len(ours) == len(theirs) == 600 and ours.document_indices.tolist() == theirs.document_indices.tolist()  # same sequences
    assert Path(result.prefixes["text"] + ".bin").read_bytes() == Path(f"{megatron_output}_text_document.bin").read_bytes()
