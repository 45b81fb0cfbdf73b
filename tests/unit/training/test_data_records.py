"""``data prepare`` without megatron-core: cutting JSONL files into chunks, encoding records, the bound on chunks in
flight, argument checks and the synthetic corpus. Expected token ids are worked out by hand from UTF-8 (the byte
tokenizer: ids 0-255 are the bytes, 256 is end of document)."""

import json
import os
import string

import numpy as np
import pytest

from megaprov.training import data
from megaprov.training.data import Chunk, DataError, TokenizerSpec


@pytest.fixture
def worker():
    """The worker state _encode reads, as _init_worker sets it in each worker process; cleared afterwards."""

    def init(keys=("text",), append_eod=True):
        data._init_worker(TokenizerSpec("byte"), tuple(keys), append_eod)

    yield init
    data._worker.clear()


def lines(*records) -> list[bytes]:
    """The lines of a chunk as the worker splits it: without their newlines, and the empty piece after the last one."""
    return [r if isinstance(r, bytes) else json.dumps(r).encode() for r in records] + [b""]


# ---- encoding one batch


def test_a_batch_becomes_token_arrays_with_end_of_document(worker):
    worker()
    encoded = data.encode_lines([b'{"text": "ab"}', b'{"text": ""}', b'{"text": "c"}', b""])
    assert encoded.error is None
    tokens, lengths = encoded.docs["text"]
    assert tokens.tolist() == [97, 98, 256, 99, 256]  # 'a' 'b' EOD 'c' EOD; the empty document is skipped
    assert lengths.tolist() == [3, 2]
    assert tokens.dtype == np.uint16 and lengths.dtype == np.int64
    assert [d.tolist() for d in data.documents(*encoded.docs["text"])] == [[97, 98, 256], [99, 256]]
    assert (encoded.count, encoded.skipped_empty, encoded.bytes_in) == (2, 1, 15 + 13 + 14)  # the three lines' bytes, newlines included


def test_without_end_of_document_and_with_two_keys(worker):
    worker(keys=("text", "title"), append_eod=False)
    encoded = data.encode_lines(lines({"text": "hé", "title": "T"}, {"text": "", "title": ""}, {"text": "x", "title": "UV"}))
    text, text_lengths = encoded.docs["text"]
    title, title_lengths = encoded.docs["title"]
    assert text.tolist() == [0x68, 0xC3, 0xA9, 0x78]  # 'h', 'é' as two UTF-8 bytes, 'x'
    assert text_lengths.tolist() == [3, 1]
    assert title.tolist() == [0x54, 0x55, 0x56] and title_lengths.tolist() == [1, 2]
    assert encoded.skipped_empty == 2  # one empty document per key
    assert encoded.count == 2


def test_a_batch_of_empty_documents_only(worker):
    worker()
    encoded = data.encode_lines(lines({"text": ""}, {"text": ""}))
    tokens, lengths = encoded.docs["text"]
    assert tokens.size == 0 and tokens.dtype == np.uint16 and lengths.size == 0
    assert (encoded.count, encoded.skipped_empty, encoded.error) == (0, 2, None)
    assert data.Encoded({}, 0, 0).count == 0  # an error batch carries no documents


class _Wide:
    """A tokenizer with a given vocabulary size: one token per document, its id the length of the text."""

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size
        self.eod = vocab_size - 1

    def encode_batch(self, texts):
        return [np.array([len(t)], dtype=np.int64) for t in texts]


@pytest.mark.parametrize(("vocab", "dtype"), [(65499, np.uint16), (65500, np.int32)])
def test_tokens_travel_in_the_type_megatron_stores(vocab, dtype):
    # megatron-core's DType.optimal_dtype (datasets/indexed_dataset.py): uint16 when the vocabulary is < 65500,
    # else int32; the worker sends that type back so that the builder does not convert it again.
    data._worker.update(tok=_Wide(vocab), keys=("text",), eod=True)
    try:
        tokens, _ = data.encode_lines(lines({"text": "abc"})).docs["text"]
    finally:
        data._worker.clear()
    assert tokens.dtype == dtype and tokens.tolist() == [3, vocab - 1]


@pytest.mark.parametrize(
    ("raw", "message", "hint"),
    [
        (b'{"text": "caf\xe9"}', "c.jsonl:12: not UTF-8 (byte 0xe9)", "save the file as UTF-8"),
        (b"{not json", "c.jsonl:12: not a JSON object (Expecting property name enclosed in double quotes)", "fix or remove that line"),
        (b"[" * 100_000 + b"]" * 100_000, "c.jsonl:12: not a JSON object (nested too deeply)", "fix or remove that line"),
        (b'["text"]', "c.jsonl:12: a line must be a JSON object, not list", "fix or remove that line"),
        (b'{"body": "x"}', "c.jsonl:12: the record has no key 'text'", "use --json-keys with the field holding the text"),
        (b'{"text": null}', "c.jsonl:12: the record has null under 'text'", "use --json-keys with the field holding the text"),
        (b'{"text": 7}', "c.jsonl:12: the record has a non-string int under 'text'", "use --json-keys with the field holding the text"),
        (b'{"text": ["a"]}', "c.jsonl:12: the record has a non-string list under 'text'", "use --json-keys with the field holding the text"),
    ],
)
def test_a_bad_record_names_its_file_line_and_fix(worker, raw, message, hint):
    worker()
    # the bad record is the fourth line of its chunk (a blank line before it counts: line numbers are the file's)
    encoded = data.encode_lines([b'{"text": "a"}', b"  ", b'{"text": "b"}', raw, b""])
    assert (encoded.error, encoded.hint, encoded.error_line) == (message.removeprefix("c.jsonl:12: "), hint, 3)
    assert encoded.docs == {}


def test_the_worker_builds_its_tokenizer_and_disables_tokenizer_threads(worker, monkeypatch):
    # tokenizers' own thread pool in a worker process would oversubscribe the cores the pool already uses
    monkeypatch.delenv("TOKENIZERS_PARALLELISM", raising=False)
    worker(keys=("a", "b"), append_eod=False)
    assert os.environ["TOKENIZERS_PARALLELISM"] == "false"
    assert isinstance(data._worker["tok"], data.ByteTokenizer)
    assert (data._worker["keys"], data._worker["eod"]) == (("a", "b"), False)
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "true")
    worker()
    assert os.environ["TOKENIZERS_PARALLELISM"] == "true"  # a user's own setting is kept


def test_byte_tokenizer_ids_are_the_utf8_bytes():
    tok = data.build_tokenizer(TokenizerSpec("byte"))
    assert (tok.eod, tok.vocab_size) == (256, 257)  # Megatron-LM reads it as NullTokenizer --vocab-size 256
    assert [a.tolist() for a in tok.encode_batch(["A€", ""])] == [[0x41, 0xE2, 0x82, 0xAC], []]


# ---- cutting files into chunks


def test_chunks_end_at_line_ends_and_cover_each_file_exactly(tmp_path, monkeypatch):
    monkeypatch.setattr(data, "CHUNK_BYTES", 4)
    src = tmp_path / "c.jsonl"
    src.write_bytes(b"\n" + b"L2\n" + b"   \n" + b"L4\n" + b"L5 is longer\n" + b"\n" + b"L7")  # no newline at the end
    other = tmp_path / "d.jsonl"
    other.write_bytes(b"M1\n")
    chunks = list(data._chunks([src, other]))
    # about 4 bytes each, then on to the end of the line that holds the 4th byte; a chunk never spans two files
    assert [(c.source, c.start, c.end) for c in chunks] == [
        (str(src), 0, 4), (str(src), 4, 8), (str(src), 8, 24), (str(src), 24, 27), (str(other), 0, 3),
    ]  # fmt: skip
    pieces = [src.read_bytes()[c.start : c.end] for c in chunks[:4]]
    assert b"".join(pieces) == src.read_bytes() and all(p.endswith(b"\n") for p in pieces[:-1])


def test_a_chunk_is_read_by_its_worker(tmp_path, worker):
    worker()
    src = tmp_path / "c.jsonl"
    src.write_bytes(b'{"text": "skip"}\n{"text": "ab"}\n\n{"text": "c"}\n{"text": "not this"}\n')
    encoded = data._encode(Chunk(str(src), 17, 17 + 15 + 1 + 14))
    assert encoded.docs["text"][0].tolist() == [97, 98, 256, 99, 256] and encoded.bytes_in == 30


def test_an_empty_file_gives_no_chunk(tmp_path):
    src = tmp_path / "c.jsonl"
    src.write_bytes(b"")
    assert list(data._chunks([src])) == []


def test_a_line_over_the_bound_is_refused_with_its_number(tmp_path, monkeypatch):
    monkeypatch.setattr(data, "CHUNK_BYTES", 8)
    monkeypatch.setattr(data, "MAX_LINE_BYTES", 64)
    src = tmp_path / "c.jsonl"
    # 64 bytes and a newline make a line; the rest of a 200-byte line where the cut falls does not (a line is at most
    # MAX_LINE_BYTES beyond the chunk's size, so the memory a worker needs is bounded)
    src.write_bytes(b"short\n\n" + b"x" * 64 + b"\n" + b"y" * 200 + b"\n")
    with pytest.raises(DataError) as info:
        list(data._chunks([src]))
    assert (info.value.message, info.value.hint) == (f"{src}:4: a line longer than 64 bytes", "split the document, or fix the line ends")


# ---- chunks in flight


class _Result:
    def __init__(self, value):
        self.value = value

    def get(self):
        return self.value


class _Pool:
    """multiprocessing's Pool, run in this process, recording how many batches were handed out."""

    def __init__(self, processes, initializer, initargs):
        self.processes = processes
        self.submitted = 0
        initializer(*initargs)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def apply_async(self, func, args):
        self.submitted += 1
        return _Result(func(*args))


def test_at_most_two_batches_per_worker_are_in_flight(tmp_path, monkeypatch):
    # The module's memory bound: at most 2 x workers chunks submitted and not yet written.
    monkeypatch.setattr(data, "CHUNK_BYTES", 1)
    src = tmp_path / "c.jsonl"
    src.write_text("".join(json.dumps({"text": c}) + "\n" for c in "abcdefghij"))  # 10 chunks of one line
    pools: list[_Pool] = []
    methods: list[str] = []

    class Context:
        def Pool(self, processes, initializer, initargs):  # noqa: N802 - multiprocessing's name
            pools.append(_Pool(processes, initializer, initargs))
            return pools[-1]

    monkeypatch.setattr(data.multiprocessing, "get_context", lambda method: methods.append(method) or Context())
    in_flight, texts = [], []
    try:
        for _, encoded in data._ordered([src], 3, (TokenizerSpec("byte"), ("text",), False)):
            in_flight.append(pools[0].submitted)
            texts.append(bytes(encoded.docs["text"][0].astype(np.uint8)).decode())
    finally:
        data._worker.clear()
    assert methods == ["spawn"] and pools[0].processes == 3
    assert in_flight == [6, 7, 8, 9, 10, 10, 10, 10, 10, 10]  # the first result is awaited once 6 = 2 x 3 are out
    assert texts == list("abcdefghij")  # in input order


def test_one_worker_encodes_in_this_process(tmp_path, monkeypatch):
    def no_pool(method):
        raise AssertionError("one worker starts no pool")

    monkeypatch.setattr(data.multiprocessing, "get_context", no_pool)
    src = tmp_path / "c.jsonl"
    src.write_text(json.dumps({"text": "hi"}) + "\n")
    try:
        out = list(data._ordered([src], 1, (TokenizerSpec("byte"), ("text",), True)))
    finally:
        data._worker.clear()
    assert [e.docs["text"][0].tolist() for _, e in out] == [[104, 105, 256]]


# ---- errors before megatron-core loads (the first batch is bad: no builder is made)


def test_a_file_name_with_a_semicolon_keeps_the_message_whole(tmp_path):
    # The problem and its fix travelled as one string split at "; ": a file named "run 1; final.jsonl" became the
    # message "…/run 1" with the hint "final.jsonl:2: not a JSON object (…)".
    src = tmp_path / "run 1; final.jsonl"
    src.write_text('{"text": "ok"}\n{"text": 1}\n')
    with pytest.raises(DataError) as info:
        data.prepare([src], tmp_path / "out", TokenizerSpec("byte"))
    assert info.value.message == f"{src}:2: the record has a non-string int under 'text'"
    assert info.value.hint == "use --json-keys with the field holding the text"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run 1; final.jsonl"]  # nothing left behind


def test_a_bad_json_line_is_the_message_and_fixing_it_the_hint(tmp_path):
    src = tmp_path / "c.jsonl"
    src.write_text("\n{oops\n")
    with pytest.raises(DataError) as info:
        data.prepare([src], tmp_path / "out", TokenizerSpec("byte"))
    assert info.value.message.startswith(f"{src}:2: not a JSON object (")
    assert info.value.hint == "fix or remove that line"


@pytest.mark.parametrize("taken", ["out_text_document.bin", "out_text_document.idx", "out_title_document.bin"])
def test_an_output_name_taken_by_a_directory_is_refused(tmp_path, taken):
    src = tmp_path / "c.jsonl"
    src.write_text('{"text": "a", "title": "b"}\n')
    (tmp_path / taken).mkdir()
    with pytest.raises(DataError) as info:
        data.prepare([src], tmp_path / "out", TokenizerSpec("byte"), json_keys=["text", "title"])
    assert info.value.message == f"--output-prefix {tmp_path / 'out'}: {tmp_path / taken} is a directory"
    assert info.value.hint == "choose another prefix"


# ---- arguments


@pytest.fixture
def jsonl(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text('{"text": "a"}\n')
    return path


def refused(*args) -> DataError:
    with pytest.raises(DataError) as info:
        data.check_arguments(*args)
    return info.value


@pytest.mark.parametrize("workers", [1, data.MAX_WORKERS])
def test_workers_from_one_to_the_maximum_are_accepted(jsonl, tmp_path, workers):
    assert data.MAX_WORKERS == 256
    data.check_arguments([jsonl], tmp_path / "out", ["text"], workers)


@pytest.mark.parametrize("workers", [0, data.MAX_WORKERS + 1, -1])
def test_workers_out_of_range_are_refused(jsonl, tmp_path, workers):
    err = refused([jsonl], tmp_path / "out", ["text"], workers)
    assert (err.message, err.hint) == (f"--workers {workers} is out of range", "use 1 to 256")


def test_the_number_of_inputs_is_bounded(tmp_path):
    # the count is checked before any file: 100,001 names are refused as such, 100,000 go on to the file checks
    assert data.MAX_INPUTS == 100_000
    err = refused(["x"] * 100_001, tmp_path / "out", ["text"], 1)
    assert (err.message, err.hint) == ("100,001 --input files", "pass at most 100,000 (concatenate the rest)")
    err = refused([str(tmp_path / "x")] * 100_000, tmp_path / "out", ["text"], 1)
    assert err.message == f"--input {tmp_path / 'x'} does not exist"


@pytest.mark.parametrize(
    ("inputs", "message", "hint"),
    [
        ([], "no --input given", "pass one or more JSONL files"),
        (["{tmp}/missing.jsonl"], "--input {tmp}/missing.jsonl does not exist", "pass JSONL files, one JSON object per line"),
        (["{tmp}"], "--input {tmp} is a directory", "pass JSONL files, one JSON object per line"),
    ],
)
def test_bad_inputs_are_named(tmp_path, inputs, message, hint):
    err = refused([i.format(tmp=tmp_path) for i in inputs], tmp_path / "out", ["text"], 1)
    assert (err.message, err.hint) == (message.format(tmp=tmp_path), hint)


def test_an_input_name_with_a_control_character_is_refused(tmp_path):
    err = refused([str(tmp_path / "a\nb.jsonl")], tmp_path / "out", ["text"], 1)
    assert "--input" in err.message and "control character" in err.message


def test_an_empty_input_name_is_refused(jsonl, tmp_path):
    err = refused([jsonl, ""], tmp_path / "out", ["text"], 1)
    assert "--input" in err.message and "empty" in err.message


def test_an_unreadable_input_is_named(jsonl, tmp_path, monkeypatch):
    # os.access as for a user without read permission (root reads any file, so chmod alone would not do)
    real = os.access
    monkeypatch.setattr(data.os, "access", lambda path, mode, **kw: False if mode == os.R_OK else real(path, mode, **kw))
    err = refused([jsonl], tmp_path / "out", ["text"], 1)
    assert (err.message, err.hint) == (f"--input {jsonl} is not readable", "check its permissions")


def test_json_keys(jsonl, tmp_path):
    err = refused([jsonl], tmp_path / "out", [], 1)
    assert (err.message, err.hint) == ("--json-keys is empty", "name the JSON field(s) holding the text, e.g. --json-keys text")
    err = refused([jsonl], tmp_path / "out", ["text", "a-b"], 1)
    assert "--json-keys" in err.message and "'a-b'" in err.message  # each key becomes part of a file name
    data.check_arguments([jsonl], tmp_path / "out", ["text", "text", "title_2"], 1)


@pytest.mark.parametrize("prefix", ["out/", "out/..", ".", "..", "/"])
def test_an_output_prefix_naming_a_directory_is_refused(jsonl, prefix):
    err = refused([jsonl], prefix, ["text"], 1)
    assert err.message == f"--output-prefix {prefix!r} names a directory"
    assert err.hint == "end it with a file name prefix, e.g. data/lab"


def test_an_empty_output_prefix_is_refused(jsonl):
    err = refused([jsonl], "", ["text"], 1)
    assert "--output-prefix" in err.message and "empty" in err.message


def test_prepare_refuses_a_missing_output_directory_before_reading(jsonl, tmp_path):
    with pytest.raises(DataError) as info:
        data.prepare([jsonl], tmp_path / "no" / "out", TokenizerSpec("byte"))
    assert info.value.message == f"--output-prefix {tmp_path / 'no' / 'out'}: directory {tmp_path / 'no'} does not exist"
    assert info.value.hint == "create it or choose another prefix"


# ---- progress


def test_progress_rates():
    progress = data.Progress(docs=10, tokens=300, seconds=4.0)
    assert (progress.docs_per_second, progress.tokens_per_second) == (2.5, 75.0)
    assert (data.Progress(docs=10, tokens=3).docs_per_second, data.Progress(docs=10, tokens=3).tokens_per_second) == (0.0, 0.0)


# ---- the synthetic corpus


def test_the_synthetic_corpus_follows_its_grammar(tmp_path):
    path = tmp_path / "corpus.jsonl"
    size = data.synthetic_corpus(path, 300, seed=7)
    text = path.read_text()
    assert size == len(text) and text.endswith("}\n")
    records = [json.loads(line) for line in text.splitlines()]
    assert [r["id"] for r in records] == list(range(300))
    counts = []
    for record in records:
        sentences = record["text"].split(". ")
        counts.append(len(sentences))
        for sentence in sentences:
            words = (sentence if sentence.endswith(".") else sentence + ".").split(" ")
            assert words[0][0] in string.ascii_uppercase
            assert " ".join(words).lower().startswith(tuple(s.lower() for s in data._SUBJECTS))
            assert (" ".join(words)).endswith(data._ENDINGS)
    assert (min(counts), max(counts)) == (3, 8)  # 3 to 8 sentences a document
    assert list(path.parent.iterdir()) == [path]  # no temporary file left


def test_the_synthetic_corpus_is_deterministic_for_a_seed(tmp_path):
    a, b, c, d = (tmp_path / n for n in "abcd")
    data.synthetic_corpus(a, 20, seed=5)
    data.synthetic_corpus(b, 20, seed=5)
    data.synthetic_corpus(c, 20, seed=6)
    data.synthetic_corpus(d, 20)
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()
    data.synthetic_corpus(c, 20, seed=1234)
    assert d.read_bytes() == c.read_bytes()  # the default seed is the CLI's default, 1234


def test_a_corpus_that_cannot_be_written_is_named_and_leaves_nothing(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(DataError) as info:
        data.synthetic_corpus(blocker / "corpus.jsonl", 3)  # its directory would be inside a file
    # its directory is not made (as data prepare: a typo in a path does not make directories as root)
    assert info.value.message == f"--output-file {blocker / 'corpus.jsonl'}: {blocker} does not exist"
    with pytest.raises(DataError, match="does not exist"):
        data.synthetic_corpus(tmp_path / "sub" / "deeper" / "corpus.jsonl", 3)
    assert not (tmp_path / "sub").exists()
    # the temporary name is taken by a directory: the write fails and that directory is not touched
    (tmp_path / ".c.jsonl.tmp").mkdir()
    with pytest.raises(DataError, match="cannot write"):
        data.synthetic_corpus(tmp_path / "c.jsonl", 3)
    assert (tmp_path / ".c.jsonl.tmp").is_dir() and not (tmp_path / "c.jsonl").exists()


def test_a_corpus_into_a_directory_names_the_fix(tmp_path):
    with pytest.raises(DataError) as info:
        data.synthetic_corpus(tmp_path, 3)
    assert (info.value.message, info.value.hint) == (f"--output-file {tmp_path} is a directory", "give a file name, e.g. corpus.jsonl")


def test_data_errors_are_usage_errors():
    assert issubclass(DataError, data.UsageError)  # exit code 2: bad input, nothing was changed


class _OnlyAddDocument:
    """A builder with add_document alone (another megatron-core's): each document goes through it."""

    def __init__(self):
        self.calls = []

    def add_document(self, ids, lengths):
        self.calls.append((ids.tolist(), lengths))


def test_a_builder_without_its_lists_gets_a_call_per_document():
    builder = _OnlyAddDocument()
    data._append(builder, np.array([1, 2, 9, 3, 9], dtype=np.uint16), np.array([3, 2]))
    assert builder.calls == [([1, 2, 9], [3]), ([3, 9], [2])]
