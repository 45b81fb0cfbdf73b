"""``data prepare`` writes datasets that megatron-core's own IndexedDataset and GPTDataset read back."""

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from megaprov.training import data
from megaprov.training.data import DataError, TokenizerSpec
from tests.helpers.owned import CLUSTER_UID, users_directory

pytest.importorskip("megatron.core", reason="megatron-core (and torch) are not installed in this environment")
warnings.filterwarnings("ignore", message="Transformer Engine and Apex are not installed")

from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder  # noqa: E402
from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig  # noqa: E402
from megatron.core.datasets.indexed_dataset import IndexedDataset  # noqa: E402

TEXTS = ["hello cluster", "", "Megatron trains GPT ünïcode ✓", "tensor and pipeline parallel " * 20, "data flows to every node"]


def corpus(tmp_path: Path, texts=TEXTS, name="in.jsonl", key="text") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps({key: t, "meta": i}) + "\n" for i, t in enumerate(texts)))
    return path


def test_byte_tokenizer_round_trip_through_indexed_dataset(tmp_path):
    result = data.prepare([corpus(tmp_path)], tmp_path / "out", TokenizerSpec("byte"))
    prefix = result.prefixes["text"]
    assert prefix == str(tmp_path / "out_text_document")
    ds = IndexedDataset(prefix)
    non_empty = [t for t in TEXTS if t]
    assert len(ds) == len(non_empty) == result.progress.docs
    assert result.progress.skipped_empty == 1
    for i, text in enumerate(non_empty):
        ids = ds[i]
        assert ids[-1] == 256  # end of document
        assert bytes(ids[:-1].astype(np.uint8)).decode("utf-8") == text
    assert ds.index.dtype == np.uint16
    assert result.progress.tokens == sum(len(t.encode()) + 1 for t in non_empty)


def test_gpt_dataset_reads_the_output(tmp_path):
    texts = [f"document {i}: " + "the cluster trains a model " * (i % 7 + 1) for i in range(300)]
    result = data.prepare([corpus(tmp_path, texts)], tmp_path / "lab", TokenizerSpec("byte"), workers=2)
    from megatron.core.tokenizers.text.libraries.null_tokenizer import NullTokenizer

    tokenizer = NullTokenizer(vocab_size=256)  # what --tokenizer-type NullTokenizer --vocab-size 256 gives Megatron-LM
    assert tokenizer.eod == 256
    config = GPTDatasetConfig(
        random_seed=1,
        sequence_length=64,
        blend=([result.prefixes["text"]], None),
        split="1,0,0",
        tokenizer=tokenizer,
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        path_to_cache=str(tmp_path / "cache"),
    )
    train, _, _ = BlendedMegatronDatasetBuilder(GPTDataset, [50, None, None], lambda: True, config).build()
    sample = train[0]
    assert tuple(sample["tokens"].shape) == (64,)
    assert int(sample["tokens"].max()) <= 256
    assert (sample["labels"][:-1] == sample["tokens"][1:]).all()


def test_workers_do_not_change_the_output(tmp_path, monkeypatch):
    monkeypatch.setattr(data, "CHUNK_BYTES", 200)  # many chunks, so ordering across workers matters
    texts = [f"line {i} " + "x" * (i % 13) for i in range(200)]
    src = corpus(tmp_path, texts)
    one = data.prepare([src], tmp_path / "one", TokenizerSpec("byte"), workers=1)
    two = data.prepare([src], tmp_path / "two", TokenizerSpec("byte"), workers=2)
    for ext in (".bin", ".idx"):
        assert Path(one.prefixes["text"] + ext).read_bytes() == Path(two.prefixes["text"] + ext).read_bytes()


def test_several_inputs_and_keys(tmp_path):
    a = tmp_path / "a.jsonl"
    a.write_text(json.dumps({"text": "first", "title": "A"}) + "\n\n" + json.dumps({"text": "second", "title": "B"}) + "\n")
    b = tmp_path / "b.jsonl"
    b.write_text(json.dumps({"text": "third", "title": "C"}) + "\n")
    result = data.prepare([a, b], tmp_path / "multi", TokenizerSpec("byte"), json_keys=["text", "title"], append_eod=False)
    texts = IndexedDataset(result.prefixes["text"])
    titles = IndexedDataset(result.prefixes["title"])
    assert [bytes(texts[i].astype(np.uint8)).decode() for i in range(3)] == ["first", "second", "third"]
    assert [bytes(titles[i].astype(np.uint8)).decode() for i in range(3)] == ["A", "B", "C"]


@pytest.fixture(scope="module")
def bpe_files(tmp_path_factory):
    """A real byte-level BPE trained here and saved in GPT-2's file formats (vocab.json, merges.txt, tokenizer.json)."""
    tokenizers = pytest.importorskip("tokenizers")
    root = tmp_path_factory.mktemp("bpe")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<|endoftext|>"], initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator([t for t in TEXTS if t] * 50, trainer)
    tok.model.save(str(root))  # vocab.json + merges.txt
    tok.save(str(root / "tokenizer.json"))
    return root, tok


def test_gpt2_bpe_files(tmp_path, bpe_files):
    root, tok = bpe_files
    spec = TokenizerSpec("gpt2-bpe", vocab_file=str(root / "vocab.json"), merge_file=str(root / "merges.txt"))
    result = data.prepare([corpus(tmp_path)], tmp_path / "bpe", spec, workers=2)
    eod = tok.token_to_id("<|endoftext|>")
    assert result.eod == eod
    ds = IndexedDataset(result.prefixes["text"])
    for i, text in enumerate(t for t in TEXTS if t):
        ids = ds[i].tolist()
        assert ids[-1] == eod
        assert tok.decode(ids[:-1]) == text
    assert len(ds[3]) < len(TEXTS[3].encode())  # BPE merges: fewer tokens than bytes


def test_huggingface_tokenizer_json(tmp_path, bpe_files):
    root, tok = bpe_files
    result = data.prepare([corpus(tmp_path)], tmp_path / "hf", TokenizerSpec("huggingface", path=str(root)))
    ds = IndexedDataset(result.prefixes["text"])
    assert tok.decode(ds[0].tolist()[:-1]) == "hello cluster"


def test_bad_json_line_is_named_and_nothing_is_left(tmp_path):
    src = tmp_path / "bad.jsonl"
    src.write_text(json.dumps({"text": "ok"}) + "\n" + "{not json\n")
    with pytest.raises(DataError) as info:
        data.prepare([src], tmp_path / "out", TokenizerSpec("byte"), workers=2)
    assert str(info.value).startswith(f"{src}:2: not a JSON object")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl"]


def test_missing_key_names_the_fix(tmp_path):
    src = corpus(tmp_path, ["a", "b"], key="content")
    with pytest.raises(DataError) as info:
        data.prepare([src], tmp_path / "out", TokenizerSpec("byte"))
    assert str(info.value) == f"{src}:1: the record has no key 'text': use --json-keys with the field holding the text"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"inputs": ["/nonexistent.jsonl"]}, "--input /nonexistent.jsonl does not exist"),
        ({"output_prefix": "/nonexistent-dir/out"}, "--output-prefix /nonexistent-dir/out: directory /nonexistent-dir does not exist"),
        ({"tokenizer": TokenizerSpec("gpt2-bpe")}, "--tokenizer gpt2-bpe needs --vocab-file and --merge-file"),
        ({"tokenizer": TokenizerSpec("huggingface", path="/nonexistent")}, "--tokenizer-path /nonexistent: no tokenizer.json there"),
        ({"workers": 0}, "--workers 0 is out of range"),
        ({"workers": 10000}, "--workers 10000 is out of range"),
        ({"json_keys": ["a/../../x"]}, "--json-keys='a/../../x' is not an identifier"),
        ({"json_keys": ["text\n"]}, "--json-keys='text\\n' is not an identifier"),
        ({"inputs": ["/"]}, "--input / is a directory"),
        ({"output_prefix": "/tmp/"}, "--output-prefix '/tmp/' names a directory"),
    ],
)
def test_bad_arguments(tmp_path, kwargs, message):
    args = {"inputs": [corpus(tmp_path)], "output_prefix": tmp_path / "out", "tokenizer": TokenizerSpec("byte")} | kwargs
    with pytest.raises(DataError) as info:
        data.prepare(**args)
    assert str(info.value).startswith(message)


def test_an_input_of_empty_documents_only_is_refused(tmp_path):
    src = tmp_path / "c.jsonl"
    src.write_text('{"text": ""}\n\n{"text": ""}\n')
    with pytest.raises(DataError) as info:
        data.prepare([src], tmp_path / "out", TokenizerSpec("byte"))
    assert info.value.message == "the input holds no non-empty documents"
    assert info.value.hint == "check --json-keys and the files' content"
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(DataError, match="no non-empty documents"):
        data.prepare([empty], tmp_path / "out", TokenizerSpec("byte"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.jsonl", "empty.jsonl"]  # the partial files are removed


def test_progress_is_reported(tmp_path):
    seen = []
    data.prepare([corpus(tmp_path)], tmp_path / "p", TokenizerSpec("byte"), on_progress=seen.append, progress_every=0.0)
    assert seen and seen[-1].docs == 4 and seen[-1].tokens_per_second > 0


def test_null_text_is_named_as_null(tmp_path):
    src = tmp_path / "c.jsonl"
    src.write_text('{"text": "a"}\n{"text": null}\n')
    with pytest.raises(DataError) as info:
        data.prepare([src], tmp_path / "out", TokenizerSpec("byte"))
    assert str(info.value) == f"{src}:2: the record has null under 'text': use --json-keys with the field holding the text"


def test_non_utf8_jsonl_is_bad_input_before_megatron_loads(tmp_path):
    src = tmp_path / "c.jsonl"
    src.write_bytes(b'{"text": "caf\xe9"}\n')
    with pytest.raises(DataError, match="c.jsonl:1: not UTF-8 \\(byte 0xe9\\)"):
        data.prepare([src], tmp_path / "out", TokenizerSpec("byte"))
    assert list(tmp_path.iterdir()) == [src]  # nothing left behind


@pytest.mark.skipif(__import__("os").geteuid() == 0, reason="root writes into read-only directories")
def test_a_read_only_output_directory_is_bad_input(tmp_path):
    out = tmp_path / "ro"
    out.mkdir(mode=0o555)
    with pytest.raises(DataError, match="is not writable"):
        data.prepare([corpus(tmp_path)], out / "x", TokenizerSpec("byte"))


def test_a_corpus_into_a_directory_is_bad_input(tmp_path):
    with pytest.raises(DataError, match="is a directory"):
        data.synthetic_corpus(tmp_path, 3)


# ---- written as the output directory's owner (the cluster user on the shared directory)


as_root_only = pytest.mark.skipif(__import__("os").geteuid() != 0, reason="root's ownership switch needs root")


@pytest.fixture
def share_data():
    """A 0755 data/ directory of the cluster user's in a directory it can traverse (pytest's tmp_path is root's 0700)."""
    with users_directory("data", CLUSTER_UID) as out:
        yield out


@as_root_only
def test_root_writes_the_dataset_as_the_owner_of_the_output_directory(tmp_path, share_data):
    import os

    src = corpus(tmp_path)
    src.chmod(0o600)  # inputs are still read as root
    result = data.prepare([src], share_data / "lab", TokenizerSpec("byte"))
    assert sorted(p.name for p in share_data.iterdir()) == ["lab_text_document.bin", "lab_text_document.idx"]
    for name in result.files:
        st = Path(name).stat()
        assert (st.st_uid, st.st_gid) == (CLUSTER_UID, CLUSTER_UID), name
    assert (os.geteuid(), os.getegid()) == (0, 0)  # back to root afterwards
    assert len(IndexedDataset(result.prefixes["text"])) == 4


@as_root_only
def test_a_directory_its_owner_cannot_write_is_refused_for_root_too(tmp_path, share_data):
    share_data.chmod(0o555)
    with pytest.raises(DataError, match=f"is not writable by uid {CLUSTER_UID}"):
        data.prepare([corpus(tmp_path)], share_data / "lab", TokenizerSpec("byte"))


@as_root_only
def test_an_explicit_owner_is_written_as_and_a_failed_run_leaves_nothing(tmp_path, share_data):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n' * 600 + "not json\n")
    with pytest.raises(DataError, match="not a JSON object"):
        data.prepare([bad], share_data / "lab", TokenizerSpec("byte"), owner=data.Owner(CLUSTER_UID, CLUSTER_UID))
    assert list(share_data.iterdir()) == []


def test_the_result_names_every_file_and_counts_what_was_read(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text('{"text": "ab", "title": "T"}\n\n{"text": "", "title": "UV"}\n{"text": "c", "title": "W"}\n')
    calls = []
    result = data.prepare(
        [src], tmp_path / "set", TokenizerSpec("byte"), json_keys=["text", "title", "text"], on_progress=calls.append, progress_every=3600
    )
    base = str(tmp_path / "set")
    assert result.prefixes == {"text": base + "_text_document", "title": base + "_title_document"}  # a repeated key once
    assert result.files == [base + s for s in ("_text_document.bin", "_text_document.idx", "_title_document.bin", "_title_document.idx")]
    assert (result.tokenizer, result.vocab_size, result.eod, result.workers) == ("byte", 257, 256, 1)
    progress = result.progress
    # text: "ab" EOD, "c" EOD (the empty one skipped); title: "T" EOD, "UV" EOD, "W" EOD
    assert (progress.docs, progress.skipped_empty, progress.tokens) == (2, 1, 5 + 7)  # docs: those of the first key
    assert progress.bytes_in == src.stat().st_size  # every byte read, the blank line's too
    assert calls == [progress] and progress.seconds > 0  # progress_every not reached: only the final report
    assert len(IndexedDataset(result.prefixes["title"])) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"] + sorted(Path(f).name for f in result.files)  # no partial files


@pytest.mark.parametrize(("vocab_size", "dtype"), [(65499, np.uint16), (65500, np.int32)])
def test_the_dataset_type_follows_the_vocabulary_size(tmp_path, vocab_size, dtype):
    # megatron-core's DType.optimal_dtype: uint16 below 65500 tokens, int32 from there (indexed_dataset.py).
    tokenizers = pytest.importorskip("tokenizers")
    vocab = {f"w{i}": i for i in range(vocab_size - 1)} | {"</s>": vocab_size - 1}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab=vocab, unk_token="w0"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    src = corpus(tmp_path, ["w1 w65000", "w7"])
    result = data.prepare([src], tmp_path / "v", TokenizerSpec("huggingface", path=str(tmp_path)))
    ds = IndexedDataset(result.prefixes["text"])
    assert ds.index.dtype == dtype
    assert [ds[i].tolist() for i in range(2)] == [[1, 65000, vocab_size - 1], [7, vocab_size - 1]]


class _Clock:
    """time for data.prepare: each monotonic() call is one second after the previous one."""

    def __init__(self) -> None:
        self.now = -1.0

    def monotonic(self) -> float:
        self.now += 1.0
        return self.now


@pytest.mark.parametrize(
    ("every", "reports"),
    [
        # the clock reads 0 at the start, 1, 2, 3 after each one-line chunk, 4 at the end (always reported)
        (None, [(1, 1.0), (2, 2.0), (3, 3.0), (3, 4.0)]),  # the default: every second
        (1.0, [(1, 1.0), (2, 2.0), (3, 3.0), (3, 4.0)]),  # a report when a full interval has passed
        (1.5, [(2, 2.0), (3, 4.0)]),  # 1 s < 1.5 s: not yet; 2 s: report; 3 - 2 < 1.5: not yet
    ],
)
def test_progress_is_reported_once_per_interval(tmp_path, monkeypatch, every, reports):
    monkeypatch.setattr(data, "CHUNK_BYTES", 1)  # a chunk per line
    monkeypatch.setattr(data, "time", _Clock())
    seen = []
    kwargs = {} if every is None else {"progress_every": every}
    result = data.prepare(
        [corpus(tmp_path, ["a", "bc", "def"])],
        tmp_path / "p",
        TokenizerSpec("byte"),
        on_progress=lambda p: seen.append((p.docs, p.seconds)),
        **kwargs,
    )
    assert seen == reports
    assert result.progress.seconds == 4.0 and result.progress.tokens == 2 + 3 + 4


def test_a_failed_write_is_named_and_leaves_nothing(tmp_path, monkeypatch):
    # megatron-core's builder opens its .bin when it is made: a full disk (or a lost NFS mount) fails there
    import errno

    from megatron.core.datasets import indexed_dataset

    def full(path, dtype):
        raise OSError(errno.ENOSPC, "No space left on device", path)

    monkeypatch.setattr(indexed_dataset, "IndexedDatasetBuilder", full)
    src = corpus(tmp_path, ["a"])
    with pytest.raises(DataError) as info:
        data.prepare([src], tmp_path / "out", TokenizerSpec("byte"))
    assert info.value.message.startswith(f"cannot write {tmp_path / 'out_text_document'}.partial-")
    assert info.value.message.endswith(".bin (No space left on device)")
    assert info.value.hint == "choose an output prefix in a writable directory"
    assert list(tmp_path.iterdir()) == [src]


def test_the_place_of_a_bad_line_is_the_files_whatever_the_chunk(tmp_path, monkeypatch):
    monkeypatch.setattr(data, "CHUNK_BYTES", 16)
    src = tmp_path / "c.jsonl"
    good = json.dumps({"text": "fine"}) + "\n"
    src.write_text(good * 5 + "\n" + good + "{oops\n" + good)  # the bad one is line 8, in the 8th chunk
    for workers in (1, 2):
        with pytest.raises(DataError) as info:
            data.prepare([src], tmp_path / "out", TokenizerSpec("byte"), workers=workers)
        assert info.value.message.startswith(f"{src}:8: not a JSON object (")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.jsonl"]
