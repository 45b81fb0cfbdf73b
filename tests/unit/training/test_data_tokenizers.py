"""The tokenizers ``data prepare`` builds (GPT-2 BPE files, a HuggingFace tokenizer.json) and how each wrong
argument is named. Tiny vocabularies written here, so every expected id is read off the vocabulary."""

import json
import sys

import pytest

from megaprov.errors import EnvironmentProblem
from megaprov.training import data
from megaprov.training.data import DataError, TokenizerSpec

tokenizers = pytest.importorskip("tokenizers")


def word_level(path, vocab, special=(), bos=None):
    """A tokenizer.json splitting on whitespace, ids from ``vocab``; ``special`` added as special tokens."""
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.add_special_tokens(list(special))
    if bos is not None:  # a template that prepends <s>: encode() adds it unless add_special_tokens=False
        tok.post_processor = tokenizers.processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, vocab[bos])])
    tok.save(str(path))
    return path


def refused(spec) -> DataError:
    with pytest.raises(DataError) as info:
        data.build_tokenizer(spec)
    return info.value


# ---- GPT-2 BPE


@pytest.fixture
def gpt2(tmp_path):
    # GPT-2's byte-level alphabet maps the bytes a and b to themselves; one merge makes "ab".
    vocab = tmp_path / "vocab.json"
    vocab.write_text(json.dumps({"a": 0, "b": 1, "ab": 2, "<|endoftext|>": 3}))
    merges = tmp_path / "merges.txt"
    merges.write_text("#version: 0.2\na b\n")
    return vocab, merges


def test_gpt2_bpe_files_make_a_byte_level_bpe(gpt2):
    vocab, merges = gpt2
    tok = data.build_tokenizer(TokenizerSpec("gpt2-bpe", vocab_file=str(vocab), merge_file=str(merges)))
    assert (tok.eod, tok.vocab_size) == (3, 4)  # <|endoftext|>, GPT-2's end of document
    assert [a.tolist() for a in tok.encode_batch(["ab", "ba", "abab"])] == [[2], [1, 0], [2, 2]]
    other = data.build_tokenizer(TokenizerSpec("gpt2-bpe", vocab_file=str(vocab), merge_file=str(merges), eod_token="b"))
    assert other.eod == 1  # --eod-token wins


@pytest.mark.parametrize(("vocab", "merges"), [(None, None), ("v.json", None), (None, "m.txt")])
def test_gpt2_bpe_needs_both_files(vocab, merges):
    err = refused(TokenizerSpec("gpt2-bpe", vocab_file=vocab, merge_file=merges))
    assert (err.message, err.hint) == ("--tokenizer gpt2-bpe needs --vocab-file and --merge-file", "give the paths of vocab.json and merges.txt")


def test_a_missing_gpt2_file_is_named(gpt2, tmp_path):
    vocab, merges = gpt2
    err = refused(TokenizerSpec("gpt2-bpe", vocab_file=str(tmp_path / "nope.json"), merge_file=str(merges)))
    assert (err.message, err.hint) == (f"--vocab-file {tmp_path / 'nope.json'} does not exist", "give the path of the GPT-2 tokenizer file")
    err = refused(TokenizerSpec("gpt2-bpe", vocab_file=str(vocab), merge_file=str(tmp_path / "nope.txt")))
    assert err.message == f"--merge-file {tmp_path / 'nope.txt'} does not exist"


def test_malformed_gpt2_files_are_named(gpt2):
    vocab, merges = gpt2
    vocab.write_text("not json")
    err = refused(TokenizerSpec("gpt2-bpe", vocab_file=str(vocab), merge_file=str(merges)))
    assert err.message.startswith("--vocab-file/--merge-file: not a GPT-2 BPE pair (")
    assert err.hint == "use GPT-2's vocab.json and merges.txt"


def test_gpt2_files_without_end_of_text_need_an_eod_token(gpt2):
    vocab, merges = gpt2
    vocab.write_text(json.dumps({"a": 0, "b": 1, "ab": 2}))
    err = refused(TokenizerSpec("gpt2-bpe", vocab_file=str(vocab), merge_file=str(merges)))
    assert err.message == f"{vocab}: no end-of-document token (<|endoftext|>) in the vocabulary"
    assert err.hint == "pass --eod-token with the tokenizer's own"


# ---- HuggingFace tokenizer.json


def test_a_tokenizer_json_and_its_directory(tmp_path):
    word_level(tmp_path / "tokenizer.json", {"[UNK]": 0, "<s>": 1, "hello": 2, "node": 3}, special=["</s>"], bos="<s>")
    for path in (tmp_path, tmp_path / "tokenizer.json"):
        tok = data.build_tokenizer(TokenizerSpec("huggingface", path=str(path)))
        assert tok.eod == 4  # </s>, added after the four words
        assert tok.vocab_size == 5  # the added token counts
        ids = tok.encode_batch(["hello node", "node"])
        assert [a.tolist() for a in ids] == [[2, 3], [3]]  # no <s> prepended: documents are concatenated raw
        assert ids[0].dtype.name == "int32"


def test_the_first_known_end_token_is_taken(tmp_path):
    # candidates in order: <|endoftext|>, </s>, <|end_of_text|>, <eos>, [SEP]
    word_level(tmp_path / "tokenizer.json", {"[UNK]": 0, "[SEP]": 1, "<eos>": 2, "<|end_of_text|>": 3, "</s>": 4})
    assert data.build_tokenizer(TokenizerSpec("huggingface", path=str(tmp_path))).eod == 4
    word_level(tmp_path / "tokenizer.json", {"[UNK]": 0, "[SEP]": 1, "<eos>": 2, "<|end_of_text|>": 3})
    assert data.build_tokenizer(TokenizerSpec("huggingface", path=str(tmp_path))).eod == 3
    word_level(tmp_path / "tokenizer.json", {"[UNK]": 0, "[SEP]": 1, "<eos>": 2})
    assert data.build_tokenizer(TokenizerSpec("huggingface", path=str(tmp_path))).eod == 2
    word_level(tmp_path / "tokenizer.json", {"[UNK]": 0, "[SEP]": 1})
    assert data.build_tokenizer(TokenizerSpec("huggingface", path=str(tmp_path))).eod == 1
    word_level(tmp_path / "tokenizer.json", {"[UNK]": 0, "[SEP]": 1, "<|endoftext|>": 2, "</s>": 3})
    assert data.build_tokenizer(TokenizerSpec("huggingface", path=str(tmp_path))).eod == 2


def test_no_end_token_names_the_candidates_and_the_flag(tmp_path):
    path = word_level(tmp_path / "tokenizer.json", {"[UNK]": 0, "a": 1})
    err = refused(TokenizerSpec("huggingface", path=str(tmp_path)))
    assert err.message == f"{path}: no end-of-document token (<|endoftext|>, </s>, <|end_of_text|>, <eos>, [SEP]) in the vocabulary"
    assert err.hint == "pass --eod-token with the tokenizer's own"
    err = refused(TokenizerSpec("huggingface", path=str(tmp_path), eod_token="<end>"))
    assert err.message == f"{path}: no end-of-document token (<end>) in the vocabulary"
    assert data.build_tokenizer(TokenizerSpec("huggingface", path=str(tmp_path), eod_token="a")).eod == 1


def test_huggingface_arguments_are_named(tmp_path):
    err = refused(TokenizerSpec("huggingface"))
    assert (err.message, err.hint) == ("--tokenizer huggingface needs --tokenizer-path", "give a tokenizer.json or the directory holding it")
    err = refused(TokenizerSpec("huggingface", path=str(tmp_path)))
    assert (err.message, err.hint) == (f"--tokenizer-path {tmp_path}: no tokenizer.json there", "give a local HuggingFace tokenizer.json")
    (tmp_path / "tokenizer.json").write_text("{}")
    err = refused(TokenizerSpec("huggingface", path=str(tmp_path)))
    assert err.message.startswith(f"--tokenizer-path {tmp_path / 'tokenizer.json'}: not a HuggingFace tokenizer (")
    assert err.hint == "give a tokenizer.json saved by tokenizers"


def test_an_unknown_tokenizer_lists_the_known_ones():
    err = refused(TokenizerSpec("sentencepiece"))
    assert (err.message, err.hint) == ("--tokenizer sentencepiece is unknown", "use byte, gpt2-bpe, huggingface")


def test_without_the_tokenizers_package_the_fix_is_named(tmp_path, monkeypatch, gpt2):
    word_level(tmp_path / "tokenizer.json", {"[UNK]": 0, "</s>": 1})
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # import tokenizers -> ImportError
    vocab, merges = gpt2
    for spec in (TokenizerSpec("huggingface", path=str(tmp_path)), TokenizerSpec("gpt2-bpe", vocab_file=str(vocab), merge_file=str(merges))):
        with pytest.raises(EnvironmentProblem) as info:
            data.build_tokenizer(spec)
        assert info.value.message == "the tokenizers package is not installed"
        assert info.value.hint == "pip install 'megaprov[train]' (or use --tokenizer byte)"
    assert isinstance(data.build_tokenizer(TokenizerSpec("byte")), data.ByteTokenizer)  # needs no package
