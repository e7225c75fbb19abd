"""loader/indexed.h through _core.IndexedDataset and _core.IndexedSource: Megatron-LM's .idx/.bin
token files as megatron-core's own IndexedDatasetBuilder writes them (uint16 and int32, thousands of
documents of random lengths including 0 and 1, shards from separate builders) read back token for
token, and those files corrupted or truncated giving one clear error each. A few files written here
byte by byte check the binding on every stack.

The megatron cases run where megatron-core is installed, and wherever the suite is told it must be
(DISTSAMPLER_REQUIRE_MEGATRON=1: the _torch2 entries, whose requirements/torch2.txt pins
megatron-core 0.16.1): missing or broken there, they fail. Debian's stack has none (Debian packages
none, and megatron-core needs torch 2): there they skip, saying so."""
import os
import struct
import sys

import numpy
import pytest
import torch

from distsampler import _core

MEGATRON_REQUIRED = os.environ.get("DISTSAMPLER_REQUIRE_MEGATRON") == "1"
NO_MEGATRON = (f"megatron-core is not installed with torch {torch.__version__} at {sys.executable} "
               "(Debian packages none; it needs torch >= 2): the _torch2 entries, which require "
               "it (requirements/torch2.txt), run this file's megatron cases")


def _megatron_installed():
    try:
        import megatron.core.datasets.indexed_dataset  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module")
def builder_class():
    """megatron-core's IndexedDatasetBuilder; a skip without megatron-core unless it is required,
    where the import error fails the case."""
    if not MEGATRON_REQUIRED and not _megatron_installed():
        pytest.skip(NO_MEGATRON)
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder
    return IndexedDatasetBuilder


def megatron_write(builder_class, prefix, docs, dtype):
    """PREFIX.bin and PREFIX.idx from megatron-core's builder, one document per sequence (add_item
    then end_document, as Megatron-LM's tools/preprocess_data.py does)."""
    builder = builder_class(prefix + ".bin", dtype=dtype)
    for doc in docs:
        builder.add_item(torch.from_numpy(doc.astype(numpy.int64)))
        builder.end_document()
    builder.finalize(prefix + ".idx")
    return prefix


def random_docs(rng, count, dtype):
    """`count` documents of random lengths (0 to 300, and some of 0 and 1 for sure) of random
    tokens over dtype's whole range."""
    info = numpy.iinfo(dtype)
    lengths = rng.integers(0, 301, size=count)
    lengths[:4] = [0, 1, 0, 1]
    lengths[rng.integers(0, count, size=count // 20)] = 0
    lengths[rng.integers(0, count, size=count // 20)] = 1
    return [rng.integers(info.min, int(info.max) + 1, size=int(n), dtype=dtype) for n in lengths]


def expect_tokens(reader, docs):
    assert reader.documents == len(reader) == len(docs)
    assert reader.total_tokens == sum(len(d) for d in docs)
    for d, doc in enumerate(docs):
        assert reader.length(d) == len(doc)
        tokens = reader.read(d)
        assert tokens.dtype == numpy.int64
        assert numpy.array_equal(tokens, doc.astype(numpy.int64)), d


@pytest.mark.parametrize("dtype, name", [(numpy.uint16, "uint16"), (numpy.int32, "int32")])
def test_megatron_files_read_back_token_for_token(builder_class, tmp_path, dtype, name):
    rng = numpy.random.default_rng(20261203 + len(name))
    docs = random_docs(rng, 3000, dtype)
    prefix = megatron_write(builder_class, str(tmp_path / "corpus_text_document"), docs, dtype)
    ds = _core.IndexedDataset(prefix)
    assert ds.prefix == prefix
    assert ds.dtype == name
    assert ds.token_bytes == numpy.dtype(dtype).itemsize
    expect_tokens(ds, docs)
    for _ in range(500):  # spans inside documents
        d = int(rng.integers(0, len(docs)))
        begin = int(rng.integers(0, len(docs[d]) + 1))
        end = int(rng.integers(begin, len(docs[d]) + 1))
        assert numpy.array_equal(ds.read(d, begin, end), docs[d][begin:end].astype(numpy.int64))


def test_megatron_shards_read_as_one_source(builder_class, tmp_path):
    rng = numpy.random.default_rng(7)
    first, second = random_docs(rng, 1500, numpy.uint16), random_docs(rng, 2500, numpy.uint16)
    prefixes = [megatron_write(builder_class, str(tmp_path / f"shard_{i}"), docs, numpy.uint16)
                for i, docs in enumerate([first, second])]
    source = _core.IndexedSource(prefixes)
    assert source.prefixes == prefixes
    assert source.dtype == "uint16"
    assert [source.shard_start(i) for i in range(3)] == [0, 1500, 4000]
    expect_tokens(source, first + second)
    other = megatron_write(builder_class, str(tmp_path / "other"), first[:3], numpy.int32)
    with pytest.raises(ValueError) as error:
        _core.IndexedSource(prefixes + [other])
    assert str(error.value) == (f"prefixes[2] = '{other}' holds int32 tokens and prefixes[0] = "
                                f"'{prefixes[0]}' holds uint16; allowed: one dtype for all the "
                                "shards")


def expect_format_error(call, path, text):
    """call() raises RuntimeError (FormatError) naming the file, an offset and `text`."""
    with pytest.raises(RuntimeError) as error:
        call()
    message = str(error.value)
    assert message.startswith(f"file '{path}', offset "), message
    assert text in message, message
    return message


def test_megatron_files_corrupted_or_truncated_give_one_clear_error(builder_class, tmp_path):
    rng = numpy.random.default_rng(11)
    docs = random_docs(rng, 200, numpy.int32)
    docs[100] = numpy.arange(5, dtype=numpy.int32)
    prefix = megatron_write(builder_class, str(tmp_path / "good"), docs, numpy.int32)
    idx, bin_ = (open(prefix + ext, "rb").read() for ext in (".idx", ".bin"))
    count = len(docs)

    def variant(name, idx_bytes, bin_bytes):
        path = str(tmp_path / name)
        with open(path + ".idx", "wb") as f:
            f.write(idx_bytes)
        with open(path + ".bin", "wb") as f:
            f.write(bin_bytes)
        return path

    p = variant("short_idx", idx[:-1], bin_)
    expect_format_error(lambda: _core.IndexedDataset(p), p + ".idx",
                        f"truncated: sequence_count = {count} and document_count = {count + 1} "
                        f"need 34 + 12 * {count} + 8 * {count + 1} = {len(idx)} bytes, the file "
                        f"ends after {len(idx) - 1}")
    p = variant("short_bin", idx, bin_[:-2])
    expect_format_error(lambda: _core.IndexedDataset(p), p + ".bin",
                        f"ends at byte {len(bin_)}, the file ends after {len(bin_) - 2}")
    p = variant("long_bin", idx, bin_ + b"\0" * 4)
    expect_format_error(lambda: _core.IndexedDataset(p), p + ".bin", "4 trailing bytes")
    p = variant("magic", b"MMIDIDY" + idx[7:], bin_)
    expect_format_error(lambda: _core.IndexedDataset(p), p + ".idx", "bad magic")
    p = variant("code", idx[:17] + bytes([9]) + idx[18:], bin_)
    expect_format_error(lambda: _core.IndexedDataset(p), p + ".idx", "dtype code = 9; allowed: 1")

    # Document 100's length -1: the file opens (entries are checked when used), the others read.
    at = 34 + 4 * 100
    p = variant("negative", idx[:at] + struct.pack("<i", -1) + idx[at + 4:], bin_)
    ds = _core.IndexedDataset(p)
    assert numpy.array_equal(ds.read(99), docs[99])
    for call in (lambda: ds.length(100), lambda: ds.read(100)):
        expect_format_error(call, p + ".idx", "sequence_lengths[100] = -1; allowed: >= 0")
    # Document 100's pointer one token late: 100 and 99 no longer meet their neighbours.
    at = 34 + 4 * count + 8 * 100
    (pointer,) = struct.unpack_from("<q", idx, at)
    p = variant("pointer", idx[:at] + struct.pack("<q", pointer + 4) + idx[at + 8:], bin_)
    ds = _core.IndexedDataset(p)
    expect_format_error(lambda: ds.read(100), p + ".idx",
                        f"sequence_pointers[100] = {pointer + 4} and sequence_lengths[100] = 5")
    expect_format_error(lambda: ds.read(99), p + ".idx",
                        f"but sequence_pointers[100] = {pointer + 4}; allowed: sequences back to "
                        "back")
    assert numpy.array_equal(ds.read(101), docs[101])


def test_megatron_multimodal_files_are_refused(builder_class, tmp_path):
    prefix = str(tmp_path / "multimodal")
    builder = builder_class(prefix + ".bin", dtype=numpy.int32, multimodal=True)
    for mode, doc in enumerate([[1, 2, 3], [4], [5, 6]]):
        builder.add_item(torch.tensor(doc, dtype=torch.int32), mode=mode % 2)
        builder.end_document()
    builder.finalize(prefix + ".idx")
    expect_format_error(lambda: _core.IndexedDataset(prefix), prefix + ".idx",
                        "a sequence_modes block (one byte per sequence, sequence_count = 3) "
                        "follows the document indices: a multimodal dataset")


# Without megatron-core: files written here by the format (docs/api.md, loader/indexed.h).
def write_by_hand(prefix, docs, code, fmt):
    pointers, offset = [], 0
    for doc in docs:
        pointers.append(offset)
        offset += len(doc) * struct.calcsize(fmt)
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, code, len(docs), len(docs) + 1))
        f.write(struct.pack(f"<{len(docs)}i", *map(len, docs)))
        f.write(struct.pack(f"<{len(docs)}q", *pointers))
        f.write(struct.pack(f"<{len(docs) + 1}q", *range(len(docs) + 1)))
    with open(prefix + ".bin", "wb") as f:
        for doc in docs:
            f.write(struct.pack(f"<{len(doc)}{fmt}", *doc))
    return prefix


def test_the_binding_reads_and_maps_errors(tmp_path):
    docs = [[1, 65535, 0], [], [7]]
    prefix = write_by_hand(str(tmp_path / "small"), docs, 8, "H")
    ds = _core.IndexedDataset(prefix)
    assert (ds.documents, ds.total_tokens, ds.dtype, ds.token_bytes) == (3, 4, "uint16", 2)
    assert [ds.read(d).tolist() for d in range(3)] == docs
    assert ds.read(0, 1).tolist() == [65535, 0]
    assert ds.read(0, 1, 2).tolist() == [65535]
    with pytest.raises(IndexError, match=r"document = 3 is out of range of '.*small'; allowed: "
                                         r"document < documents\(\) = 3"):
        ds.read(3)
    with pytest.raises(IndexError, match=r"document = 0, begin = 2, end = 4: out of range of "
                                         r"'.*'; allowed: begin <= end <= length\(0\) = 3"):
        ds.read(0, 2, 4)
    with pytest.raises(RuntimeError, match="cannot open: No such file or directory"):
        _core.IndexedDataset(str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="prefixes: empty; allowed: at least one prefix"):
        _core.IndexedSource([])
    other = write_by_hand(str(tmp_path / "other"), [[-5, 2**31 - 1]], 4, "i")
    source = _core.IndexedSource([other])
    assert source.read(0).tolist() == [-5, 2**31 - 1]
    with pytest.raises(IndexError, match=r"shard = 2 is out of range; allowed: shard <= "
                                         r"shards\(\).size\(\) = 1"):
        source.shard_start(2)


def test_s3_prefixes_that_name_no_object_are_refused_before_any_request():
    # An s3:// prefix needs a bucket and a key; the rest of s3:// sources is tested against a
    # real server (tests/dist/s3_tokens.py).
    for prefix in ("s3://", "s3://bucket", "s3:///key"):
        with pytest.raises(ValueError, match=r"no bucket or no key; allowed: s3://bucket/key"):
            _core.IndexedDataset(prefix)
    before = _core.s3_counts()["requests"]
    with pytest.raises(ValueError):
        _core.IndexedSource(["s3://bucket"])
    assert _core.s3_counts()["requests"] == before
