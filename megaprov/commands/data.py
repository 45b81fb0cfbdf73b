"""data prepare and data corpus: datasets in Megatron-LM's format."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from megaprov.commands.base import Outcome, command, family, inventory_flag, reporter, upto
from megaprov.errors import UsageError
from megaprov.output import console


def register(sub: Any) -> None:
    data_sub = family(
        sub,
        "data",
        "dataset preparation",
        ["megaprov data corpus --output-file corpus.jsonl", "megaprov data prepare --input corpus.jsonl --output-prefix data/corpus"],
        "data_command",
    )
    prep = command(
        data_sub,
        "prepare",
        "data prepare",
        "JSONL -> Megatron .bin/.idx (megatron-core IndexedDatasetBuilder)",
        [
            "megaprov data prepare --input corpus.jsonl --output-prefix /shared/data/corpus",
            "megaprov data prepare --input a.jsonl b.jsonl --output-prefix data/web -i inventory.ini --workers 8 \\",
            "    --tokenizer gpt2-bpe --vocab-file vocab.json --merge-file merges.txt",
        ],
    )
    prep.add_argument("--input", nargs="+", required=True, metavar="FILE.jsonl")
    prep.add_argument("--output-prefix", required=True, help="writes PREFIX_<key>_document.bin/.idx")
    prep.add_argument("--tokenizer", choices=("byte", "gpt2-bpe", "huggingface"), default="byte")
    prep.add_argument("--vocab-file", help="GPT-2 vocab.json (gpt2-bpe)")
    prep.add_argument("--merge-file", help="GPT-2 merges.txt (gpt2-bpe)")
    prep.add_argument("--tokenizer-path", help="tokenizer.json or its directory (huggingface)")
    prep.add_argument("--eod-token", help="end-of-document token (default: <|endoftext|>, </s>, ...)")
    prep.add_argument("--json-keys", nargs="+", default=["text"], help="JSON fields to tokenise (default: text)")
    prep.add_argument("--workers", type=upto(256), default=1, help="tokenising processes")
    prep.add_argument("--no-append-eod", dest="append_eod", action="store_false", help="do not end each document with the EOD token")
    inventory_flag(prep, "a relative --output-prefix goes into this cluster's shared directory")
    prep.set_defaults(handler=_prepare)
    corpus = command(
        data_sub,
        "corpus",
        "data corpus",
        "generate a small synthetic JSONL corpus (the lab's quick start)",
        ["megaprov data corpus --output-file corpus.jsonl --documents 5000"],
    )
    corpus.add_argument("--output-file", required=True, metavar="FILE.jsonl")
    corpus.add_argument("--documents", type=upto(100_000_000), default=2000)
    corpus.add_argument("--seed", type=int, default=1234)
    corpus.set_defaults(handler=_corpus)


def shared_prefix(inventory: str, prefix: str) -> str:
    """A relative --output-prefix lands in the cluster's shared directory, where this machine sees it."""
    from megaprov import values
    from megaprov.owner import as_owner_of
    from megaprov.training import jobs

    if prefix.startswith("/"):
        raise UsageError(f"--output-prefix {prefix} is absolute but -i puts it under the shared directory", "give a relative prefix, e.g. data/lab")
    relative = values.relative_path(prefix, "--output-prefix")
    root = jobs.shared_view(inventory).resolve()
    path = root / relative
    # A link inside the shared directory (the cluster user can make one) must not lead the output out of it.
    parent = path.parent.resolve()
    if not values.inside(str(parent), str(root)):
        raise UsageError(f"--output-prefix {prefix}: {path.parent} leads outside the shared directory {root}", "give a prefix inside it")
    chain = (path.parent, *path.parent.parents)
    existing = next(p for p in chain if p.exists())
    try:
        with as_owner_of(existing):  # the cluster user's directories, as on the nodes (root is squashed there)
            # each missing level 0755 (mkdir(parents=True) makes the upper ones with the umask's mode); the existing
            # one too, where a file in the way fails
            for directory in reversed(chain[: chain.index(existing) + 1]):
                directory.mkdir(mode=0o755, exist_ok=True)
    except OSError as exc:
        raise UsageError(
            f"--output-prefix {prefix}: cannot create {path.parent} ({exc.strerror})",
            "check the shared directory's permissions",
        ) from None
    return str(path)


def _corpus(args: argparse.Namespace) -> Outcome:
    from megaprov.training import data

    size = data.synthetic_corpus(Path(args.output_file), args.documents, args.seed)
    return Outcome(
        "data corpus",
        {"file": args.output_file, "documents": args.documents, "bytes": size},
        text=lambda: console().print(f"data: {args.documents:,} documents, {size:,} bytes in {args.output_file}", markup=False),
    )


def _prepare(args: argparse.Namespace) -> Outcome:
    from megaprov.training import data, jobview

    say = reporter(args)
    data.check_arguments(args.input, args.output_prefix, args.json_keys, args.workers)  # before the slow imports
    if args.inventory:
        args.output_prefix = shared_prefix(args.inventory, args.output_prefix)

    pending: list[str] = []

    def progress(p: Any) -> None:
        # each line is shown when the next one comes: the last one would only repeat the summary that ends the run
        if pending:
            say.say(pending.pop())
        pending.append(jobview.progress_line(p))

    spec = data.TokenizerSpec(args.tokenizer, args.vocab_file, args.merge_file, args.tokenizer_path, args.eod_token)
    # the final figures are the result (stdout), not one more progress line (stderr)
    result = data.prepare(
        args.input, args.output_prefix, spec, args.json_keys, args.workers, args.append_eod, progress, progress_every=5.0, final_progress=False
    )
    p = result.progress
    return Outcome(
        "data prepare",
        {
            "prefixes": result.prefixes,
            "files": result.files,
            "tokenizer": result.tokenizer,
            "vocab_size": result.vocab_size,
            "eod": result.eod,
            "workers": result.workers,
            "documents": p.docs,
            "tokens": p.tokens,
            "bytes": p.bytes_in,
            "skipped_empty": p.skipped_empty,
            "seconds": p.seconds,
            "startup_seconds": round(p.startup_seconds, 3),
            "docs_per_second": p.docs_per_second,
            "tokens_per_second": p.tokens_per_second,
        },
        text=lambda: jobview.render_prepare(result),
    )
