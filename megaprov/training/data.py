"""``megaprov data prepare``: JSONL documents -> Megatron ``.bin/.idx`` datasets.

Each input file is cut into chunks of about ``CHUNK_BYTES`` that end at a line's end; this process only finds the
cuts (a seek and one line read per chunk). Worker processes read their chunks, parse the JSON and tokenise, so
reading scales with the workers as tokenising does. Results come back in input order; this process writes each
chunk's tokens with one write into megatron-core's ``IndexedDatasetBuilder`` and its document lengths in bulk, so it
does little more than wait (with 1 worker everything runs in this process). At most ``2 x workers`` chunks are in
flight, so memory is bounded whatever the input size, and a line is at most ``MAX_LINE_BYTES``. Output files are
written under temporary names and renamed at the end: an interrupted run leaves no half dataset behind. The files
are byte for byte those of Megatron-LM's ``tools/preprocess_data.py`` with the same tokenizer
(tests/unit/training/test_data_upstream.py runs both).

Output naming follows Megatron-LM's ``tools/preprocess_data.py``: ``<prefix>_<key>_document.{bin,idx}``, and
``<prefix>_<key>_document`` is what a job's ``data.prefixes`` lists.

Ownership: run as root, ``prepare`` writes its files as the owner of the output directory (:func:`written_as`).
With ``-i`` that directory is the shared directory's ``data/``, which the storage stage makes the cluster user's:
the nodes' cluster user can then replace or remove the dataset, and on an NFS export with root_squash (the
default) root could not have written there at all (it is nobody on the share; a chown after the write would be
refused for the same reason). Inputs are still read as root.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from megaprov import values
from megaprov.errors import EnvironmentProblem, UsageError
from megaprov.owner import Owner, directory_owner, written_as

CHUNK_BYTES = 1 << 20  # a worker's piece of a file (about; it ends at the end of a line)
MAX_LINE_BYTES = 256 << 20  # one document's line
MAX_WORKERS = 256
MAX_INPUTS = 100_000
TOKENIZER_TYPES = ("byte", "gpt2-bpe", "huggingface")


class DataError(UsageError):
    """Bad input data or arguments; nothing is left behind."""


class Tokenizer(Protocol):
    eod: int
    vocab_size: int

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]: ...


@dataclass(frozen=True)
class TokenizerSpec:
    """A picklable description from which each worker builds its own tokenizer."""

    type: str
    vocab_file: str | None = None
    merge_file: str | None = None
    path: str | None = None
    eod_token: str | None = None


class ByteTokenizer:
    """UTF-8 bytes as token ids 0-255, end of document 256: needs no files (lab, CI).

    Megatron-LM reads such data with ``--tokenizer-type NullTokenizer --vocab-size 256``.
    """

    eod = 256
    vocab_size = 257

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        return [np.frombuffer(t.encode("utf-8"), dtype=np.uint8) for t in texts]


class _HFTokenizer:
    def __init__(self, tok: Any, eod_token: str | None, source: str) -> None:
        self.tok = tok
        vocab = tok.get_vocab(with_added_tokens=True)
        candidates = [eod_token] if eod_token else ["<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>", "[SEP]"]
        eod = next((vocab[c] for c in candidates if c in vocab), None)
        if eod is None:
            raise DataError(
                f"{source}: no end-of-document token ({', '.join(candidates)}) in the vocabulary", "pass --eod-token with the tokenizer's own"
            )
        self.eod = int(eod)
        self.vocab_size = int(tok.get_vocab_size(with_added_tokens=True))

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        return [np.asarray(e.ids, dtype=np.int32) for e in self.tok.encode_batch(texts, add_special_tokens=False)]


def _tokenizers_module() -> Any:
    try:
        import tokenizers
    except ImportError:
        raise EnvironmentProblem("the tokenizers package is not installed", "pip install 'megaprov[train]' (or use --tokenizer byte)") from None
    return tokenizers


def build_tokenizer(spec: TokenizerSpec) -> Tokenizer:
    if spec.type == "byte":
        return ByteTokenizer()
    if spec.type == "gpt2-bpe":
        if not spec.vocab_file or not spec.merge_file:
            raise DataError("--tokenizer gpt2-bpe needs --vocab-file and --merge-file", "give the paths of vocab.json and merges.txt")
        for flag, name in (("--vocab-file", spec.vocab_file), ("--merge-file", spec.merge_file)):
            if not Path(name).is_file():
                raise DataError(f"{flag} {name} does not exist", "give the path of the GPT-2 tokenizer file")
        tk = _tokenizers_module()
        try:
            tok = tk.Tokenizer(tk.models.BPE.from_file(spec.vocab_file, spec.merge_file))
        except Exception as exc:  # tokenizers raises plain Exception for malformed files
            raise DataError(f"--vocab-file/--merge-file: not a GPT-2 BPE pair ({exc})", "use GPT-2's vocab.json and merges.txt") from None
        tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = tk.decoders.ByteLevel()
        return _HFTokenizer(tok, spec.eod_token or "<|endoftext|>", spec.vocab_file)
    if spec.type == "huggingface":
        if not spec.path:
            raise DataError("--tokenizer huggingface needs --tokenizer-path", "give a tokenizer.json or the directory holding it")
        file = Path(spec.path)
        if file.is_dir():
            file = file / "tokenizer.json"
        if not file.is_file():
            raise DataError(f"--tokenizer-path {spec.path}: no tokenizer.json there", "give a local HuggingFace tokenizer.json")
        tk = _tokenizers_module()
        try:
            tok = tk.Tokenizer.from_file(str(file))
        except Exception as exc:
            raise DataError(f"--tokenizer-path {file}: not a HuggingFace tokenizer ({exc})", "give a tokenizer.json saved by tokenizers") from None
        return _HFTokenizer(tok, spec.eod_token, str(file))
    raise DataError(f"--tokenizer {spec.type} is unknown", "use " + ", ".join(TOKENIZER_TYPES))


@dataclass(frozen=True)
class Chunk:
    """Bytes ``start`` to ``end`` of ``source``: whole lines (``start`` is a line's first byte, ``end`` after a newline
    or at the end of the file)."""

    source: str
    start: int
    end: int


@dataclass
class Encoded:
    """A chunk's documents per key: all tokens in one array plus each document's length (cheap to pickle)."""

    docs: dict[str, tuple[np.ndarray, np.ndarray]]
    bytes_in: int
    skipped_empty: int
    error: str | None = None  # the problem (without its place: see error_line)
    hint: str = "fix or remove that line"  # its fix (apart: a file name may hold any text, '; ' included)
    error_line: int = 0  # the bad line's number within its chunk, from 0 (blank lines counted)

    @property
    def count(self) -> int:
        return len(next(iter(self.docs.values()))[1]) if self.docs else 0


_worker: dict[str, Any] = {}


def _init_worker(spec: TokenizerSpec, keys: tuple[str, ...], append_eod: bool) -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    _worker.update(tok=build_tokenizer(spec), keys=keys, eod=append_eod)


def _encode(chunk: Chunk) -> Encoded:
    """A worker's whole task: read the chunk, then encode its lines."""
    with open(chunk.source, "rb") as handle:
        handle.seek(chunk.start)
        raw = handle.read(chunk.end - chunk.start)
    return encode_lines(raw.split(b"\n"))


def encode_lines(lines: list[bytes]) -> Encoded:
    """JSON lines (blank ones skipped, still counted for line numbers) -> each key's tokens, with the worker's tokenizer."""
    tok: Tokenizer = _worker["tok"]
    keys: tuple[str, ...] = _worker["keys"]
    texts: dict[str, list[str]] = {k: [] for k in keys}
    size = sum(map(len, lines)) + max(len(lines) - 1, 0)  # the bytes read: the lines and the newlines between them
    for number, raw in enumerate(lines):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except UnicodeDecodeError as exc:
            return Encoded({}, size, 0, f"not UTF-8 (byte 0x{raw[exc.start]:02x})", "save the file as UTF-8", number)
        except (json.JSONDecodeError, RecursionError) as exc:
            return Encoded({}, size, 0, f"not a JSON object ({getattr(exc, 'msg', 'nested too deeply')})", error_line=number)
        if not isinstance(record, dict):
            return Encoded({}, size, 0, f"a line must be a JSON object, not {type(record).__name__}", error_line=number)
        for key in keys:
            value = record.get(key)
            if not isinstance(value, str):
                what = "has no key" if key not in record else f"has {'null' if value is None else 'a non-string ' + type(value).__name__} under"
                return Encoded({}, size, 0, f"the record {what} {key!r}", "use --json-keys with the field holding the text", number)
            texts[key].append(value)
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    skipped = 0
    dtype = np.uint16 if tok.vocab_size < 65500 else np.int32  # what the builder stores, halving the transfer
    eod = np.array([tok.eod], dtype=dtype)
    for key in keys:
        parts: list[np.ndarray] = []
        lengths: list[int] = []
        for ids in tok.encode_batch(texts[key]):
            if ids.size == 0:
                skipped += 1
                continue
            parts.append(ids.astype(dtype, copy=False))
            if _worker["eod"]:
                parts.append(eod)
            lengths.append(int(ids.size) + (1 if _worker["eod"] else 0))
        tokens = np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)
        out[key] = (tokens, np.asarray(lengths, dtype=np.int64))
    return Encoded(out, size, skipped)


def _chunks(inputs: Sequence[Path]) -> Iterator[Chunk]:
    """Each file's chunks, in order: a seek to about ``CHUNK_BYTES`` further and the rest of that line per chunk."""
    for path in inputs:
        with path.open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            start = 0
            while start < size:
                handle.seek(min(start + CHUNK_BYTES, size) - 1)
                rest = handle.readline(MAX_LINE_BYTES + 1)
                if not rest:  # the file shrank while it was read: what is there was cut
                    break
                if len(rest) > MAX_LINE_BYTES and not rest.endswith(b"\n"):
                    line = _line_number(path, handle.tell() - len(rest))
                    bound = f"{MAX_LINE_BYTES >> 20} MiB" if MAX_LINE_BYTES >= 1 << 20 else f"{MAX_LINE_BYTES} bytes"
                    raise DataError(f"{path}:{line}: a line longer than {bound}", "split the document, or fix the line ends")
                end = handle.tell()
                yield Chunk(str(path), start, end)
                start = end


def _line_number(path: Path, offset: int) -> int:
    """The number (from 1) of the line holding byte ``offset`` of ``path``: counted only when a message needs it."""
    newlines = 0
    with path.open("rb") as handle:
        while offset > 0:
            block = handle.read(min(offset, 1 << 20))
            if not block:
                break
            newlines += block.count(b"\n")
            offset -= len(block)
    return newlines + 1


@dataclass
class Progress:
    docs: int = 0
    tokens: int = 0
    bytes_in: int = 0
    skipped_empty: int = 0
    seconds: float = 0.0
    # until the first chunk was back (workers spawned, the tokenizer loaded): the rates are from then on
    startup_seconds: float = 0.0
    startup_docs: int = 0
    startup_tokens: int = 0

    @property
    def steady(self) -> bool:
        """Whether the rates are from after the start-up (more than one chunk came back, and time passed since)."""
        return bool(self.startup_seconds) and self.seconds > self.startup_seconds and self.docs > self.startup_docs

    def _rate(self, count: int, before: int) -> float:
        if self.steady:
            return (count - before) / (self.seconds - self.startup_seconds)
        return count / self.seconds if self.seconds else 0.0

    @property
    def docs_per_second(self) -> float:
        return self._rate(self.docs, self.startup_docs)

    @property
    def tokens_per_second(self) -> float:
        return self._rate(self.tokens, self.startup_tokens)


@dataclass
class PrepareResult:
    prefixes: dict[str, str]
    files: list[str]
    tokenizer: str
    vocab_size: int
    eod: int
    workers: int
    progress: Progress = field(default_factory=Progress)


def _ordered(inputs: Sequence[Path], workers: int, init: tuple[Any, ...]) -> Iterator[tuple[Chunk, Encoded]]:
    """Each chunk with its encoding, in input order, with at most 2 x workers in flight."""
    if workers == 1:
        _init_worker(*init)
        for chunk in _chunks(inputs):
            yield chunk, _encode(chunk)
        return
    # spawn: workers start from a clean interpreter, not a fork of one that has loaded torch and its threads
    # (measured here: forkserver was 5x slower than spawn on the same input; fork is unsafe after torch).
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(workers, initializer=_init_worker, initargs=init) as pool:
        pending: deque[tuple[Chunk, Any]] = deque()
        for chunk in _chunks(inputs):
            pending.append((chunk, pool.apply_async(_encode, (chunk,))))
            if len(pending) >= 2 * workers:
                done, result = pending.popleft()
                yield done, result.get()
        while pending:
            done, result = pending.popleft()
            yield done, result.get()


def documents(tokens: np.ndarray, lengths: np.ndarray) -> Iterator[np.ndarray]:
    """A chunk's tokens cut back into its documents."""
    start = 0
    for length in lengths.tolist():
        yield tokens[start : start + length]
        start += length


def _append(builder: Any, tokens: np.ndarray, lengths: np.ndarray) -> None:
    """A chunk's documents into megatron-core's builder: what ``add_document`` does once per document (its tokens
    to the .bin, its length, the document's end), done for all of them at once. A builder without those lists
    (another megatron-core) gets ``add_document`` per document."""
    data_file, sequences, indices = (getattr(builder, name, None) for name in ("data_file", "sequence_lengths", "document_indices"))
    if not isinstance(sequences, list) or not isinstance(indices, list) or data_file is None or getattr(builder, "multimodal", False):
        for ids in documents(tokens, lengths):
            builder.add_document(ids, [ids.size])
        return
    data_file.write(np.asarray(tokens, dtype=builder.dtype).tobytes(order="C"))
    first = len(sequences)
    sequences.extend(lengths.tolist())
    indices.extend(range(first + 1, first + 1 + len(lengths)))


def prepare(
    inputs: Sequence[str | Path],
    output_prefix: str | Path,
    tokenizer: TokenizerSpec,
    json_keys: Sequence[str] = ("text",),
    workers: int = 1,
    append_eod: bool = True,
    on_progress: Callable[[Progress], None] | None = None,
    progress_every: float = 1.0,
    owner: Owner | None = None,
    final_progress: bool = True,
) -> PrepareResult:
    """Tokenise JSONL ``inputs`` into ``<output_prefix>_<key>_document.{bin,idx}`` per JSON key.

    The files are written as ``owner`` (default, for root: the output directory's owner; see the module notes)."""
    check_arguments(inputs, output_prefix, json_keys, workers)
    paths = [Path(p) for p in inputs]
    keys = tuple(dict.fromkeys(json_keys))
    prefix = Path(output_prefix)
    if not prefix.parent.is_dir():
        raise DataError(f"--output-prefix {prefix}: directory {prefix.parent} does not exist", "create it or choose another prefix")
    owner = owner if owner is not None else directory_owner(prefix.parent)
    with written_as(owner):
        writable = os.access(prefix.parent, os.W_OK | os.X_OK, effective_ids=os.access in os.supports_effective_ids)
    if not writable:
        who = f" by uid {owner.uid}" if owner else ""
        raise DataError(f"--output-prefix {prefix}: directory {prefix.parent} is not writable{who}", "choose a prefix in a directory you can write")
    tok = build_tokenizer(tokenizer)  # fail on a bad tokenizer before starting workers

    names = {k: f"{prefix}_{k}_document" for k in keys}
    tmp = {k: f"{names[k]}.partial-{os.getpid()}" for k in keys}
    for key in keys:
        for ext in (".bin", ".idx"):
            if Path(names[key] + ext).is_dir():
                raise DataError(f"--output-prefix {prefix}: {names[key] + ext} is a directory", "choose another prefix")
    builders: dict[str, Any] = {}
    progress = Progress()
    start = last = time.monotonic()
    done = False
    try:
        for chunk, encoded in _ordered(paths, workers, (tokenizer, keys, append_eod)):
            if encoded.error:
                line = _line_number(Path(chunk.source), chunk.start) + encoded.error_line
                raise DataError(f"{chunk.source}:{line}: {encoded.error}", encoded.hint)
            if not builders:  # megatron-core (and torch) load only once the first chunk is known to be good
                builders = _builders(tmp, keys, tok.vocab_size, owner)
            for key, (tokens, lengths) in encoded.docs.items():
                _append(builders[key], tokens, lengths)
                progress.tokens += int(tokens.size)
            progress.docs += encoded.count
            progress.bytes_in += encoded.bytes_in
            progress.skipped_empty += encoded.skipped_empty
            now = time.monotonic()
            if not progress.startup_seconds:
                progress.startup_seconds, progress.startup_docs, progress.startup_tokens = now - start, progress.docs, progress.tokens
            if on_progress and now - last >= progress_every:
                progress.seconds = now - start
                on_progress(progress)
                last = now
        if progress.docs == 0:
            raise DataError("the input holds no non-empty documents", "check --json-keys and the files' content")
        files = []
        with written_as(owner):
            for key, builder in builders.items():
                builder.finalize(tmp[key] + ".idx")
            for key in keys:
                for ext in (".bin", ".idx"):
                    os.replace(tmp[key] + ext, names[key] + ext)
                    files.append(names[key] + ext)
        done = True
    finally:
        if not done:
            with written_as(owner):
                for key in keys:
                    for ext in (".bin", ".idx"):
                        Path(tmp[key] + ext).unlink(missing_ok=True)
    progress.seconds = time.monotonic() - start
    if on_progress and final_progress:
        on_progress(progress)
    return PrepareResult(names, files, tokenizer.type, tok.vocab_size, tok.eod, workers, progress)


def check_arguments(inputs: Sequence[str | Path], output_prefix: str | Path, json_keys: Sequence[str], workers: int) -> None:
    """Every argument of ``data prepare`` that can be checked without torch: raised in well under a second."""
    try:
        _check_arguments(inputs, output_prefix, json_keys, workers)
    except values.BadValue as bad:
        raise DataError(bad.message, bad.hint) from None


def _check_arguments(inputs: Sequence[str | Path], output_prefix: str | Path, json_keys: Sequence[str], workers: int) -> None:
    if not inputs:
        raise DataError("no --input given", "pass one or more JSONL files")
    if len(inputs) > MAX_INPUTS:
        raise DataError(f"{len(inputs):,} --input files", f"pass at most {MAX_INPUTS:,} (concatenate the rest)")
    for raw in inputs:
        values.text(str(raw), "--input", values.MAX_PATH, empty=False)
        p = Path(raw)
        if p.is_dir():
            raise DataError(f"--input {p} is a directory", "pass JSONL files, one JSON object per line")
        if not p.is_file():
            raise DataError(f"--input {p} does not exist", "pass JSONL files, one JSON object per line")
        if not os.access(p, os.R_OK):
            raise DataError(f"--input {p} is not readable", "check its permissions")
    if not 1 <= workers <= MAX_WORKERS:
        raise DataError(f"--workers {workers} is out of range", f"use 1 to {MAX_WORKERS}")
    keys = tuple(dict.fromkeys(json_keys))
    if not keys:
        raise DataError("--json-keys is empty", "name the JSON field(s) holding the text, e.g. --json-keys text")
    for key in keys:  # each key becomes part of a file name: <prefix>_<key>_document.bin
        values.identifier(key, "--json-keys")
    prefix = values.text(str(output_prefix), "--output-prefix", values.MAX_PATH, empty=False)
    if prefix.endswith("/") or Path(prefix).name in ("", ".", ".."):
        raise DataError(f"--output-prefix {prefix!r} names a directory", "end it with a file name prefix, e.g. data/lab")


def _builders(tmp: dict[str, str], keys: tuple[str, ...], vocab_size: int, owner: Owner | None) -> dict[str, Any]:
    try:
        with warnings.catch_warnings():  # megatron-core announces at import that CPU-only nodes lack TE and apex
            warnings.filterwarnings("ignore", message=r".*(Transformer Engine|Apex).*not installed", category=UserWarning)
            # and torch's extension builder that a machine without CUDA has no CUDA runtime: not data prepare's concern
            logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
            from megatron.core.datasets.indexed_dataset import DType, IndexedDatasetBuilder
    except ImportError:
        raise EnvironmentProblem("megatron-core is not installed", "pip install 'megaprov[train]' (megatron-core writes the .bin/.idx)") from None
    dtype = DType.optimal_dtype(vocab_size)
    try:
        with written_as(owner):  # each builder opens its .bin here; later writes go to the open file
            return {k: IndexedDatasetBuilder(tmp[k] + ".bin", dtype=dtype) for k in keys}
    except OSError as exc:
        raise DataError(f"cannot write {exc.filename or tmp[keys[0]]} ({exc.strerror})", "choose an output prefix in a writable directory") from None


# ---- a corpus megaprov generates (the lab's quick start and tests; no download)

_SUBJECTS = ("the cluster", "a node", "the scheduler", "every rank", "the operator", "the checkpoint", "a GPU", "the network")
_VERBS = ("starts", "checks", "saves", "loads", "trains", "waits for", "reports", "restarts")
_OBJECTS = ("the job", "a batch", "the gradients", "the loss", "its log", "the shared directory", "the model", "the next iteration")
_ENDINGS = ("before the deadline.", "after the barrier.", "on every node.", "without a retry.", "as planned.", "in order.")


def synthetic_corpus(path: Path, documents: int, seed: int = 1234) -> int:
    """JSONL of short English-like documents from a small grammar (learnable: a tiny GPT's loss falls within tens
    of iterations). Deterministic for a seed; returns the bytes written."""
    import random

    rng = random.Random(seed)
    lines = []
    for index in range(documents):
        sentences = []
        for _ in range(rng.randint(3, 8)):
            sentences.append(f"{rng.choice(_SUBJECTS).capitalize()} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} {rng.choice(_ENDINGS)}")
        lines.append(json.dumps({"id": index, "text": " ".join(sentences)}))
    text = "\n".join(lines) + "\n"
    if path.is_dir():
        raise DataError(f"--output-file {path} is a directory", "give a file name, e.g. corpus.jsonl")
    if not path.parent.is_dir():  # as data prepare: a typo in a path does not make directories (as root)
        raise DataError(f"--output-file {path}: {path.parent} does not exist", "create the directory first, or fix the path")
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text)
        tmp.replace(path)
    except OSError as exc:
        if tmp.is_file():
            tmp.unlink()
        raise DataError(f"--output-file {path}: cannot write ({exc.strerror})", "choose a writable location") from None
    return len(text)
