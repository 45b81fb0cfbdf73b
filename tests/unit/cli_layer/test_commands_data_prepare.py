"""`megaprov data prepare` and `megaprov data corpus` (megaprov.commands.data) from argv to what the operator reads: the
exit code, the lines on stdout and stderr, the JSON document of ``-o json``, each command's --help, the refusals of
its flags, and what `data prepare` hands to the tokeniser. Every command runs in-process through megaprov.cli.main
with the real parser.

Stood in, only at the edge: megaprov.training.data.prepare (it runs megatron-core's builder over torch) by a recorder
that keeps its arguments exactly as given, reports the progress it was told to through the handler's callback, and
returns a real data.PrepareResult; and, for the bounds of --documents only, data.synthetic_corpus (a corpus of 100
million documents is not written in a test). Everything else is real: data.check_arguments, the shared directory an
inventory names (megaprov.training.jobs over a real inventory file) and the directories made in it, the corpus
written by data.synthetic_corpus, and the progress and summary lines of megaprov.training.jobview."""

from __future__ import annotations

import json

import pytest

from megaprov.cli import main
from megaprov.errors import ExitCode
from megaprov.training import data
from megaprov.training.data import PrepareResult, Progress, TokenizerSpec
from tests.helpers.commandline import isolate, run


@pytest.fixture(autouse=True)
def _env(tmp_path, monkeypatch):
    """As the benchmark runs: no colour, a known width; megaprov's state and config of this test alone, the current
    directory the test's own, and no default inventory."""
    isolate(monkeypatch, tmp_path)


def help_lines(capsys, *argv) -> list[str]:
    """The --help of a command as the operator reads it, each line stripped of its indentation."""
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--help"])
    assert exit_.value.code == 0
    return [line.strip() for line in capsys.readouterr().out.splitlines()]


def options(lines: list[str]) -> list[str]:
    return lines[lines.index("options:") + 1 : lines.index("examples:") - 1]


def examples(lines: list[str]) -> list[str]:
    return lines[lines.index("examples:") + 1 :]


# ---- the stood-in tokeniser


class PrepareRecorder:
    """data.prepare: keeps each call's positional and keyword arguments as given, reports ``reports`` (real Progress
    objects) through the handler's progress callback, and returns a PrepareResult for the keys it was handed."""

    def __init__(self, reports=(), final=None, vocab_size=257, eod=256):
        self.calls: list[tuple[tuple, dict]] = []
        self.reports = list(reports)
        self.final = final or Progress(docs=3, tokens=36, bytes_in=85, seconds=25.0, startup_seconds=5.0, startup_docs=1, startup_tokens=11)
        self.vocab_size, self.eod = vocab_size, eod

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        inputs, prefix, spec, keys, workers, append_eod, on_progress = args
        for report in self.reports:
            on_progress(report)
        names = {k: f"{prefix}_{k}_document" for k in dict.fromkeys(keys)}
        files = [names[k] + ext for k in names for ext in (".bin", ".idx")]
        return PrepareResult(names, files, spec.type, self.vocab_size, self.eod, workers, self.final)


@pytest.fixture
def tokeniser(monkeypatch):
    recorder = PrepareRecorder()
    monkeypatch.setattr(data, "prepare", recorder)
    return recorder


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text('{"text": "alpha beta"}\n')
    return path


def shared_cluster(tmp_path):
    """An inventory whose shared directory is tmp_path/shared (made here)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    path = tmp_path / "inventory.ini"
    path.write_text(
        "[head]\nhead ansible_host=10.1.0.1\n[gpu_nodes]\nnode1 ansible_host=10.1.0.11\n"
        f"[all:vars]\nmegaprov_gpu_expected=false\nmegaprov_shared_dir={shared}\n"
    )
    return path, shared


# ---- data prepare: what it hands to the tokeniser


def test_prepare_hands_every_tokenizer_flag_and_choice_to_the_tokeniser(capsys, tmp_path, tokeniser):
    (tmp_path / "a.jsonl").write_text("{}\n")
    (tmp_path / "b.jsonl").write_text("{}\n")
    code, out, err = run(
        capsys,
        "data", "prepare", "--input", "a.jsonl", "b.jsonl", "--output-prefix", "out/ds",
        "--tokenizer", "gpt2-bpe", "--vocab-file", "vocab.json", "--merge-file", "merges.txt",
        "--tokenizer-path", "tok.json", "--eod-token", "<|end|>",
        "--json-keys", "body", "title", "--workers", "256", "--no-append-eod", "-o", "json",
    )  # fmt: skip
    assert (code, err) == (ExitCode.OK, "")
    [(args, kwargs)] = tokeniser.calls
    assert args[:6] == (
        ["a.jsonl", "b.jsonl"],
        "out/ds",
        TokenizerSpec("gpt2-bpe", "vocab.json", "merges.txt", "tok.json", "<|end|>"),
        ["body", "title"],
        256,
        False,
    )
    assert callable(args[6])
    # a report every 5 s; the final figures are the result on stdout, not one more progress line
    assert kwargs == {"progress_every": 5.0, "final_progress": False}
    result = json.loads(out)["result"]
    assert result["prefixes"] == {"body": "out/ds_body_document", "title": "out/ds_title_document"}
    assert (result["tokenizer"], result["workers"]) == ("gpt2-bpe", 256)


def test_prepare_defaults_to_the_byte_tokenizer_the_text_key_one_worker_and_an_eod(capsys, corpus, tokeniser):
    code, _, err = run(capsys, "data", "prepare", "--input", corpus, "--output-prefix", "data/lab", "-o", "json")
    assert (code, err) == (ExitCode.OK, "")
    [(args, kwargs)] = tokeniser.calls
    assert args[:6] == ([str(corpus)], "data/lab", TokenizerSpec("byte", None, None, None, None), ["text"], 1, True)


@pytest.mark.parametrize("kind", ["byte", "gpt2-bpe", "huggingface"])
def test_each_tokenizer_kind_is_accepted_and_handed_on(capsys, corpus, tokeniser, kind):
    code, _, err = run(capsys, "data", "prepare", "--input", corpus, "--output-prefix", "p", "--tokenizer", kind, "-o", "json")
    assert (code, err) == (ExitCode.OK, "")
    assert tokeniser.calls[0][0][2] == TokenizerSpec(kind)


def test_an_unknown_tokenizer_is_refused_with_the_kinds_there_are(capsys, corpus, tokeniser):
    code, out, err = run(capsys, "data", "prepare", "--input", corpus, "--output-prefix", "p", "--tokenizer", "sentencepiece")
    assert (code, out) == (ExitCode.USAGE, "")
    assert (
        err
        == "megaprov: error: megaprov data prepare: argument --tokenizer: invalid choice: 'sentencepiece': choose from byte, gpt2-bpe, huggingface\n"
    )
    assert tokeniser.calls == []


def test_more_than_256_workers_are_refused_by_the_parser(capsys, corpus, tokeniser):
    code, out, err = run(capsys, "data", "prepare", "--input", corpus, "--output-prefix", "p", "--workers", "257")
    assert (code, out) == (ExitCode.USAGE, "")
    assert err == "megaprov: error: megaprov data prepare: argument --workers: '257' is more than 256: see `megaprov data prepare --help`\n"
    assert tokeniser.calls == []


@pytest.mark.parametrize(
    ("argv", "missing"),
    [(["--output-prefix", "data/lab"], "--input"), (["--input", "corpus.jsonl"], "--output-prefix")],
    ids=["input", "output-prefix"],
)
def test_input_and_output_prefix_are_required(capsys, corpus, tokeniser, argv, missing):
    code, out, err = run(capsys, "data", "prepare", *argv)
    assert (code, out) == (ExitCode.USAGE, "")
    assert err == f"megaprov: error: megaprov data prepare: the following arguments are required: {missing}: see `megaprov data prepare --help`\n"
    assert tokeniser.calls == []


def test_a_prefix_naming_a_directory_is_refused_before_the_shared_directory_is_touched(capsys, tmp_path, corpus, tokeniser):
    inventory, shared = shared_cluster(tmp_path)
    code, out, err = run(capsys, "data", "prepare", "--input", corpus, "--output-prefix", "data/", "-i", inventory)
    assert (code, out) == (ExitCode.USAGE, "")
    assert err == "megaprov: error: --output-prefix 'data/' names a directory: end it with a file name prefix, e.g. data/lab\n"
    assert list(shared.iterdir()) == [] and tokeniser.calls == []


def test_a_relative_prefix_with_an_inventory_is_handed_on_inside_the_shared_directory(capsys, tmp_path, corpus, tokeniser):
    inventory, shared = shared_cluster(tmp_path)
    code, _, err = run(capsys, "data", "prepare", "--input", corpus, "--output-prefix", "data/web/lab", "-i", inventory, "-o", "json")
    assert (code, err) == (ExitCode.OK, "")
    assert tokeniser.calls[0][0][1] == f"{shared}/data/web/lab"
    assert (shared / "data" / "web").is_dir() and list((shared / "data" / "web").iterdir()) == []


# ---- data prepare: what the operator reads


def test_prepare_as_json_gives_the_result_and_the_figures_of_the_run(capsys, corpus, monkeypatch):
    final = Progress(docs=7, tokens=1234, bytes_in=5678, skipped_empty=2, seconds=12.5, startup_seconds=1.23456, startup_docs=2, startup_tokens=234)
    recorder = PrepareRecorder(reports=[Progress(docs=2, tokens=234, seconds=5.0)], final=final, vocab_size=50257, eod=50256)
    monkeypatch.setattr(data, "prepare", recorder)
    code, out, err = run(capsys, "data", "prepare", "--input", corpus, "--output-prefix", "ds", "-o", "json")
    assert (code, err) == (ExitCode.OK, "")  # no progress beside the JSON document
    assert json.loads(out) == {
        "megaprov": json.loads(out)["megaprov"],
        "command": "data prepare",
        "ok": True,
        "result": {
            "prefixes": {"text": "ds_text_document"},
            "files": ["ds_text_document.bin", "ds_text_document.idx"],
            "tokenizer": "byte",
            "vocab_size": 50257,
            "eod": 50256,
            "workers": 1,
            "documents": 7,
            "tokens": 1234,
            "bytes": 5678,
            "skipped_empty": 2,
            "seconds": 12.5,
            "startup_seconds": 1.235,
            "docs_per_second": 5 / (12.5 - 1.23456),
            "tokens_per_second": 1000 / (12.5 - 1.23456),
        },
    }


def test_prepare_shows_each_report_but_the_last_on_stderr_and_the_summary_on_stdout(capsys, corpus, monkeypatch):
    reports = [
        Progress(docs=1000, tokens=20000, bytes_in=2_500_000, seconds=5.0),
        Progress(docs=3000, tokens=60000, bytes_in=7_500_000, seconds=10.0),
    ]
    final = Progress(docs=4000, tokens=80000, bytes_in=10_000_000, skipped_empty=3, seconds=12.0)
    monkeypatch.setattr(data, "prepare", PrepareRecorder(reports=reports, final=final))
    code, out, err = run(capsys, "data", "prepare", "--input", corpus, "--output-prefix", "ds")
    assert code == ExitCode.OK
    assert err == "data: 1,000 docs, 20,000 tokens, 2.5 MB in 5.0 s (200 docs/s, 4,000 tokens/s)\n"
    assert out == (
        "data: 4,000 docs, 80,000 tokens, 10.0 MB in 12.0 s (333 docs/s, 6,667 tokens/s)\n"
        "data: skipped 3 empty document(s)\n"
        "data: text: prefix ds_text_document (list it under data.prefixes)\n"
    )


# ---- data prepare and data corpus: their --help


def test_the_data_family_lists_its_actions_and_examples(capsys):
    lines = help_lines(capsys, "data")
    assert lines[0] == "usage: megaprov data [-h] [--debug] [-o {text,json}] ACTION ..."
    assert "Dataset preparation." in lines
    assert "prepare             JSONL -> Megatron .bin/.idx (megatron-core IndexedDatasetBuilder)" in lines
    assert "corpus              generate a small synthetic JSONL corpus (the lab's quick start)" in lines
    assert examples(lines) == [
        "megaprov data corpus --output-file corpus.jsonl",
        "megaprov data prepare --input corpus.jsonl --output-prefix data/corpus",
    ]


def test_data_without_an_action_names_both(capsys):
    assert run(capsys, "data") == (
        ExitCode.USAGE,
        "",
        "megaprov: error: megaprov data: missing ACTION: use `megaprov data corpus`, `megaprov data prepare`\n",
    )


def test_prepare_help_describes_every_flag(capsys):
    lines = help_lines(capsys, "data", "prepare")
    assert "JSONL -> Megatron .bin/.idx (megatron-core IndexedDatasetBuilder)." in lines
    assert options(lines)[4:] == [
        "--input FILE.jsonl [FILE.jsonl ...]",
        "--output-prefix OUTPUT_PREFIX",
        "writes PREFIX_<key>_document.bin/.idx",
        "--tokenizer {byte,gpt2-bpe,huggingface}",
        "--vocab-file VOCAB_FILE",
        "GPT-2 vocab.json (gpt2-bpe)",
        "--merge-file MERGE_FILE",
        "GPT-2 merges.txt (gpt2-bpe)",
        "--tokenizer-path TOKENIZER_PATH",
        "tokenizer.json or its directory (huggingface)",
        "--eod-token EOD_TOKEN",
        "end-of-document token (default: <|endoftext|>, </s>, ...)",
        "--json-keys JSON_KEYS [JSON_KEYS ...]",
        "JSON fields to tokenise (default: text)",
        "--workers WORKERS     tokenising processes",
        "--no-append-eod       do not end each document with the EOD token",
        "-i INVENTORY, --inventory INVENTORY",
        "a relative --output-prefix goes into this cluster's shared directory",
    ]
    assert examples(lines) == [
        "megaprov data prepare --input corpus.jsonl --output-prefix /shared/data/corpus",
        "megaprov data prepare --input a.jsonl b.jsonl --output-prefix data/web -i inventory.ini --workers 8 \\",
        "--tokenizer gpt2-bpe --vocab-file vocab.json --merge-file merges.txt",
    ]


def test_the_second_prepare_example_continues_on_an_indented_line(capsys):
    with pytest.raises(SystemExit):
        main(["data", "prepare", "--help"])
    out = capsys.readouterr().out
    assert out.endswith("--workers 8 \\\n      --tokenizer gpt2-bpe --vocab-file vocab.json --merge-file merges.txt\n")


def test_corpus_help_describes_its_flags(capsys):
    lines = help_lines(capsys, "data", "corpus")
    assert lines[0] == "usage: megaprov data corpus [-h] [--debug] [-o {text,json}] --output-file FILE.jsonl [--documents DOCUMENTS] [--seed SEED]"
    assert "Generate a small synthetic JSONL corpus (the lab's quick start)." in lines
    assert options(lines)[4:] == ["--output-file FILE.jsonl", "--documents DOCUMENTS", "--seed SEED"]
    assert examples(lines) == ["megaprov data corpus --output-file corpus.jsonl --documents 5000"]


# ---- data corpus


def test_corpus_writes_the_documents_of_the_seed_given(capsys, tmp_path):
    code, out, err = run(capsys, "data", "corpus", "--output-file", "c.jsonl", "--documents", "40", "--seed", "7", "-o", "json")
    assert (code, err) == (ExitCode.OK, "")
    size = data.synthetic_corpus(tmp_path / "expected.jsonl", 40, 7)
    assert (tmp_path / "c.jsonl").read_bytes() == (tmp_path / "expected.jsonl").read_bytes()
    assert json.loads(out)["result"] == {"file": "c.jsonl", "documents": 40, "bytes": size}


def test_a_seed_that_is_not_a_whole_number_is_refused(capsys, tmp_path):
    code, out, err = run(capsys, "data", "corpus", "--output-file", "c.jsonl", "--seed", "7.5")
    assert (code, out) == (ExitCode.USAGE, "")
    assert err == "megaprov: error: megaprov data corpus: argument --seed: invalid int value: '7.5': see `megaprov data corpus --help`\n"
    assert not (tmp_path / "c.jsonl").exists()


def test_corpus_prints_a_path_with_brackets_as_it_is(capsys, tmp_path):
    code, out, err = run(capsys, "data", "corpus", "--output-file", "[bold]c.jsonl", "--documents", "3")
    size = (tmp_path / "[bold]c.jsonl").stat().st_size
    assert (code, err) == (ExitCode.OK, "")
    assert out == f"data: 3 documents, {size:,} bytes in [bold]c.jsonl\n"


def test_corpus_requires_its_output_file(capsys, tmp_path):
    code, out, err = run(capsys, "data", "corpus", "--documents", "3")
    assert (code, out) == (ExitCode.USAGE, "")
    assert err == "megaprov: error: megaprov data corpus: the following arguments are required: --output-file: see `megaprov data corpus --help`\n"


@pytest.fixture
def writer(monkeypatch):
    """data.synthetic_corpus as a recorder: the bounds of --documents are tested without writing 100 million."""
    calls = []

    def synthetic_corpus(path, documents, seed=1234):
        calls.append((path, documents, seed))
        return 99

    monkeypatch.setattr(data, "synthetic_corpus", synthetic_corpus)
    return calls


def test_corpus_takes_up_to_100_million_documents(capsys, tmp_path, writer):
    code, out, err = run(capsys, "data", "corpus", "--output-file", "c.jsonl", "--documents", "100000000")
    assert (code, out, err) == (ExitCode.OK, "data: 100,000,000 documents, 99 bytes in c.jsonl\n", "")
    assert [(str(p), n, s) for p, n, s in writer] == [("c.jsonl", 100_000_000, 1234)]


def test_corpus_refuses_more_than_100_million_documents(capsys, tmp_path, writer):
    code, out, err = run(capsys, "data", "corpus", "--output-file", "c.jsonl", "--documents", "100000001")
    assert (code, out) == (ExitCode.USAGE, "")
    assert (
        err
        == "megaprov: error: megaprov data corpus: argument --documents: '100000001' is more than 100,000,000: see `megaprov data corpus --help`\n"
    )
    assert writer == []


# ---- a refusal in -o json names the command that refused


def test_a_refused_prepare_names_data_prepare_in_its_json_envelope(capsys, corpus, tokeniser):
    code, out, err = run(capsys, "data", "prepare", "--input", corpus, "--output-prefix", "data/", "-o", "json")
    doc = json.loads(out)
    assert (code, doc["command"], doc["ok"], doc["result"]) == (ExitCode.USAGE, "data prepare", False, {})
    assert doc["error"]["message"] == "--output-prefix 'data/' names a directory"
    assert err == "megaprov: error: --output-prefix 'data/' names a directory: end it with a file name prefix, e.g. data/lab\n"


def test_a_refused_corpus_names_data_corpus_in_its_json_envelope(capsys, tmp_path):
    (tmp_path / "out").mkdir()
    code, out, err = run(capsys, "data", "corpus", "--output-file", "out", "--documents", "3", "-o", "json")
    doc = json.loads(out)
    assert (code, doc["command"], doc["ok"], doc["result"]) == (ExitCode.USAGE, "data corpus", False, {})
    assert doc["error"]["message"] == "--output-file out is a directory"
    assert err == "megaprov: error: --output-file out is a directory: give a file name, e.g. corpus.jsonl\n"
