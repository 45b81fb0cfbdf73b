#!/usr/bin/env python3
"""`megaprov data prepare` throughput and peak memory on a generated JSONL, with 1 and 2 workers, for the
byte-level tokenizer and a byte-level BPE (trained here on the same text and saved as GPT-2 vocab/merges
files). Where the upstream snapshot is beside the checkout (../shared/upstream/), Megatron-LM's own
tools/preprocess_data.py runs on the same input and BPE files with the same workers, and the outputs are compared
byte for byte. Also times `megaprov plan --suggest` on the GPT-3 175B example. Prints figures; asserts nothing.

    .venv/bin/python benchmarks/bench_data_prepare.py [--mb 200] [--workers 1,2] [--tokenizers byte,gpt2-bpe] [--no-upstream]

Seconds are the command's wall time, start-up included (the interpreter, the workers, torch for the writer);
docs/s and tokens/s are after the first chunk came back (the steady rate).

Peak memory is the largest sum of resident memory of the command and all its worker processes, sampled
every 50 ms from /proc.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORDS = (
    "the of and to in a is that for it as was with be by on not he this are or his from at which but have an they you were her she "
    "there been one all we their has would when if so no will more can its out up who them some into other than time only new could "
    "cluster node gpu tensor pipeline parallel checkpoint training loss throughput megatron dataset token batch gradient optimizer"
).split()


def generate(path: Path, megabytes: int) -> int:
    rng = random.Random(0)
    target = megabytes * 1_000_000
    size = docs = 0
    with path.open("w") as out:
        while size < target:
            n = rng.randint(20, 1500)
            text = " ".join(rng.choice(WORDS) for _ in range(n))
            line = json.dumps({"text": text, "id": docs}) + "\n"
            out.write(line)
            size += len(line)
            docs += 1
    return docs


def bpe_files(root: Path, sample: Path) -> tuple[str, str]:
    import tokenizers

    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=8000, special_tokens=["<|endoftext|>"], initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet()
    )
    with sample.open() as handle:
        texts = [json.loads(line)["text"] for line in itertools.islice(handle, 2000)]
    tok.train_from_iterator(texts, trainer)
    tok.model.save(str(root))
    return str(root / "vocab.json"), str(root / "merges.txt")


def tree_rss(pid: int) -> int:
    """Resident bytes of a process and its descendants."""
    total = 0
    stack = [pid]
    while stack:
        p = stack.pop()
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
            for task in Path(f"/proc/{p}/task").iterdir():
                stack += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return total


def prepare(src: Path, prefix: Path, tokenizer: str, workers: int, extra: list[str]) -> tuple[dict, int, float]:
    argv = [sys.executable, "-m", "megaprov", "data", "prepare", "--input", str(src), "--output-prefix", str(prefix)]
    argv += ["--tokenizer", tokenizer, "--workers", str(workers), "--output", "json", *extra]
    start = time.monotonic()
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "NO_COLOR": "1"})
    peak = 0
    while proc.poll() is None:
        peak = max(peak, tree_rss(proc.pid))
        time.sleep(0.05)
    out, err = proc.communicate()
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"data prepare failed ({proc.returncode}): {err.strip()}")
    return json.loads(out)["result"], peak, seconds


def upstream_tree(root: Path) -> Path | None:
    """Megatron-LM's tree at the pinned tag, unpacked from the snapshot beside the checkout, or None."""
    import tarfile

    archive = Path(os.environ.get("MEGAPROV_UPSTREAM") or ROOT.parent / "shared" / "upstream") / "megatron-lm-core_v0.16.1.tar.gz"
    if not archive.is_file():
        return None
    tree = root / "megatron-lm"
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    return tree


def upstream_prepare(tree: Path, src: Path, prefix: Path, vocab: str, merges: str, workers: int) -> tuple[int, float]:
    """Megatron-LM's tools/preprocess_data.py (its GPT2BPETokenizer, --append-eod): peak RSS and wall seconds."""
    argv = [sys.executable, str(ROOT / "tests" / "helpers" / "megatron_preprocess.py"), str(tree), "--input", str(src)]
    argv += ["--output-prefix", str(prefix), "--tokenizer-type", "GPT2BPETokenizer", "--legacy-tokenizer", "--vocab-file", vocab]
    argv += ["--merge-file", merges, "--append-eod", "--workers", str(workers)]
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(tree)})
    peak = 0
    while proc.poll() is None:
        peak = max(peak, tree_rss(proc.pid))
        time.sleep(0.05)
    _, err = proc.communicate()
    if not Path(f"{prefix}_text_document.idx").is_file():
        raise SystemExit(f"preprocess_data.py failed: {err.strip()[-2000:]}")
    return peak, time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--tokenizers", default="byte,gpt2-bpe")
    parser.add_argument("--no-upstream", action="store_true", help="leave out Megatron-LM's preprocess_data.py")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="megaprov-bench-") as tmp:
        root = Path(tmp)
        src = root / "corpus.jsonl"
        start = time.monotonic()
        docs = generate(src, args.mb)
        print(f"input: {src.stat().st_size / 1e6:.0f} MB, {docs:,} documents (generated in {time.monotonic() - start:.1f} s)")
        vocab, merges = bpe_files(root, src)
        print(f"{'tokenizer':<10} {'workers':>7} {'seconds':>8} {'docs/s':>10} {'tokens/s':>12} {'MB/s':>7} {'peak RSS':>9}")
        rates: dict[tuple[str, int], float] = {}
        walls: dict[tuple[str, int], float] = {}
        kept: list[Path] = []
        for tokenizer in args.tokenizers.split(","):
            extra = ["--vocab-file", vocab, "--merge-file", merges] if tokenizer == "gpt2-bpe" else []
            for workers in (int(w) for w in args.workers.split(",")):
                result, peak, seconds = prepare(src, root / f"out-{tokenizer}-{workers}", tokenizer, workers, extra)
                rates[(tokenizer, workers)] = result["tokens_per_second"]
                print(
                    f"{tokenizer:<10} {workers:>7} {seconds:>8.1f} {result['docs_per_second']:>10,.0f} {result['tokens_per_second']:>12,.0f}"
                    f" {result['bytes'] / 1e6 / result['seconds']:>7.1f} {peak / 2**20:>7.0f} MiB"
                )
                walls[(tokenizer, workers)] = seconds
                if tokenizer == "gpt2-bpe" and workers == 1:
                    kept = [Path(f) for f in result["files"]]  # compared with upstream's below
                else:
                    for f in result["files"]:
                        Path(f).unlink()
            if (tokenizer, 1) in rates and (tokenizer, 2) in rates:
                print(
                    f"{tokenizer:<10} 2 workers / 1 worker: {rates[(tokenizer, 2)] / rates[(tokenizer, 1)]:.2f}x steady tokens/s,"
                    f" {walls[(tokenizer, 1)] / walls[(tokenizer, 2)]:.2f}x wall"
                )
        tree = None if args.no_upstream or "gpt2-bpe" not in args.tokenizers.split(",") else upstream_tree(root)
        if tree is not None:
            up: dict[int, float] = {}
            for workers in (int(w) for w in args.workers.split(",")):
                prefix = root / f"upstream-{workers}"
                peak, seconds = upstream_prepare(tree, src, prefix, vocab, merges, workers)
                up[workers] = seconds
                same = bool(kept) and all(  # megaprov's output with 1 worker, where it ran
                    Path(f"{prefix}_text_document{ext}").read_bytes() == next(k for k in kept if k.name.endswith(ext)).read_bytes()
                    for ext in (".bin", ".idx")
                )
                verdict = "identical" if same else "DIFFERENT" if kept else "not compared"
                print(
                    f"{'upstream':<10} {workers:>7} {seconds:>8.1f} {'':>10} {'':>12} {src.stat().st_size / 1e6 / seconds:>7.1f}"
                    f" {peak / 2**20:>7.0f} MiB  (Megatron-LM preprocess_data.py; output {verdict})"
                )
            for workers, seconds in up.items():
                if ("gpt2-bpe", workers) in walls:
                    print(f"gpt2-bpe, {workers} worker(s): megaprov {walls[('gpt2-bpe', workers)] / seconds:.2f}x of upstream's wall time")
    job = ROOT / "examples" / "jobs" / "gpt3-175b-128nodes.yml"
    timings = []
    for _ in range(3):
        proc = subprocess.run(
            [sys.executable, "-m", "megaprov", "plan", "--job", str(job), "--gpu", "H100-SXM", "--suggest", "--output", "json"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        timings.append(json.loads(proc.stdout)["result"]["seconds"])
    print(f"plan --suggest on the 175B example (1024 GPUs): search {min(timings) * 1000:.0f} ms (best of 3)")


if __name__ == "__main__":
    main()
