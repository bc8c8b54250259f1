#include "app/hf_records.h"

namespace zt {

const char* const kRecordsPython = R"PY(
import bz2, gzip, io, lzma, re, zlib

# The fields of the SFT records that no option reads, with the first file and line (or row)
# holding each: an example loses them (Alpaca's "input" beside its instruction), so the user is
# told once, at the end, as the Hugging Face Trainer names the dataset columns it ignores.
unread_fields = {}

# Columns that make a record something other than a text SFT example, unless an option reads
# them: KTO's boolean label, media; and a preference pair (DPO's chosen and rejected), which
# only explains an example that is missing (preference_hint), since SFT sets such as
# ultrafeedback_binarized's train_sft keep the pair beside their messages.
MEDIA_COLUMNS = ("images", "videos", "audios", "image", "video", "audio")
OTHER_DATA_COLUMNS = ("chosen", "rejected", "label", *MEDIA_COLUMNS)

def absent(value):
    """Whether a column's value holds nothing: null, empty, or only such values inside (an Arrow
    Image struct {"bytes": null, "path": null}, a list of nulls)."""
    if isinstance(value, (list, tuple)):
        return all(absent(v) for v in value)
    if isinstance(value, dict):
        return all(absent(v) for v in value.values())
    return value is None or value == ""

def preference_hint(record):
    """" (...)" naming a preference pair when the record holds chosen and rejected, for an error
    that finds no example in it; "" otherwise."""
    if isinstance(record, dict) and not absent(record.get("chosen")) and \
            not absent(record.get("rejected")):
        return (" (the line holds 'chosen' and 'rejected', a preference pair: DPO's data; "
                "zerotrain trains SFT, and --response-field chosen or --messages-field chosen "
                "learns the chosen replies)")
    return ""

def check_text_sft(path, number, record, read):
    """Refuses a record whose unread columns say it is not a text SFT example: KTO's label false
    (an undesirable reply, which SFT would learn), and a multimodal example's media
    (LLaMA-Factory's images, videos, audios; LLaVA's image). A column that holds nothing
    (absent) is read as absent."""
    if not isinstance(record, dict):
        return
    given = {k: record[k] for k in OTHER_DATA_COLUMNS
             if k in record and k not in read and not absent(record[k])}
    if given.get("label") is False:
        sys.exit(f"{path}:{number}: 'label' is false, KTO's tag of an undesirable reply; "
                 "zerotrain trains SFT, which would learn it (keep the lines labelled true)")
    media = [k for k in MEDIA_COLUMNS if k in given]
    if media:
        sys.exit(f"{path}:{number}: '{media[0]}' holds media, a multimodal example; zerotrain "
                 "trains text-only models, which would learn replies about media they never see")

def records(path, keys, read=None):
    """(where, record) of each record of `path` (numbered_records), its `keys` checked to hold
    strings. `read`: the fields the examples are made of, when the others are to be noted in
    unread_fields; a Parquet file is read for these columns alone (for `keys` when None), so that
    a column no option reads is never converted (but those check_text_sft reads). A file that
    holds no record is refused: an empty file the size check could not see (compressed), or one
    of blank lines, "[]" or no rows."""
    count = 0
    columns = keys if read is None else (*read, *OTHER_DATA_COLUMNS)
    for number, record in numbered_records(path, columns, read is not None):
        if read is not None and isinstance(record, dict):
            check_text_sft(path, number, record, read)
            for key in record:
                if key not in read:
                    unread_fields.setdefault(key, f"{path}:{number}")
        for key in keys:
            string_field(path, number, record, key)
        count += 1
        yield number, record
    if not count:
        sys.exit(f"{path}: no records in the file (no JSON line, an empty JSON array, no Parquet "
                 "or Arrow row, or nothing once decompressed)")

def numbered_records(path, columns, note):
    """(where, record) of each JSON line, of each element of a file that is one JSON array (as
    Stanford Alpaca's alpaca_data.json is, and Hugging Face datasets' json loader reads), or of
    each row of a Parquet file, an Arrow file or a directory datasets' save_to_disk wrote: where
    is the line number, "element N" or "row N". JSON text may
    be compressed (gzip, bzip2, xz, zstd: C4's .json.gz, SlimPajama's .jsonl.zst), as the
    datasets json loader reads it; its lines are counted in the decompressed text. A byte-order
    mark at the start is read past, as a file saved by a Windows editor has one. Bytes that are
    not UTF-8 fail at their line, not before: the lines before them are records (a decoder fails
    on the chunk it reads ahead). `columns` and `note`: table_rows'."""
    kind = file_kind(path)
    if kind in TABLES:
        yield from TABLES[kind](path, columns, note)
        return
    if not starts_array(path, kind):
        with opened(path, kind) as f:
            yield from json_lines(path, f)
        return
    with opened(path, kind) as f:
        text = read_whole(path, f)
    if UNDECODED.search(text):
        sys.exit(not_utf8(path))
    try:
        elements = json.loads(text)
    except (ValueError, RecursionError) as e:
        sys.exit(f"{path}: not a JSON array: {e}")
    yield from ((f"element {i}", record) for i, record in enumerate(elements, 1))

# An Arrow stream starts with a message's continuation marker; an Arrow IPC file with its magic.
ARROW_STREAM, ARROW_FILE = b"\xff\xff\xff\xff", b"ARROW1\x00\x00"

# The magic numbers a compressed file starts with, checked before it is read as text (no UTF-8
# text starts with these bytes; bzip2's is checked with its block's magic, below).
MAGIC = ((b"\x1f\x8b", "gzip"), (b"\xfd7zXZ\x00", "xz"), (b"\x28\xb5\x2f\xfd", "zstd"))

def file_kind(path):
    """"saved" (a directory, as save_to_disk writes), "parquet", "arrow" (an Arrow stream, as
    datasets writes its files, or an Arrow IPC file, Feather's), a compression, or "text"."""
    if os.path.isdir(path):
        return "saved"
    with open(path, "rb") as f:
        head = f.read(10)
        if head.startswith(b"PAR1"):  # and so may text: parquet_file tells
            size = f.seek(0, os.SEEK_END)
            f.seek(max(size - 4, 0))
            return "parquet" if parquet_file(head, f.read(4), size) else "text"
    if head.startswith((ARROW_STREAM, ARROW_FILE)):  # bytes no text starts with
        return "arrow"
    for magic, kind in MAGIC:
        if head.startswith(magic):
            return kind
    if head[:1] and head[0] & 0xF0 == 0x50 and head[1:4] == b"\x2a\x4d\x18":
        return "zstd"  # a skippable frame first, as pzstd writes one
    # "BZh", the block size 1-9, then a block's magic (pi) or the end of an empty stream's (sqrt pi)
    if head[:3] == b"BZh" and head[3:4] in b"123456789" and head[4:] in (b"1AY&SY",
                                                                         b"\x17rE8P\x90"):
        return "bzip2"
    return "text"

def parquet_file(head, tail, size):
    """Whether a file that starts with Parquet's magic number is Parquet: it ends with it too,
    or, cut short, a control character follows it (a page header's first byte), as in no text."""
    return (size >= 12 and tail == b"PAR1") or (len(head) > 4 and head[4] < 0x20
                                                and head[4] not in b"\t\n\r")

TEXT = dict(encoding="utf-8-sig", errors="surrogateescape", newline="")

def opened(path, kind, **text):
    """A text stream of the file, decompressed (`text`: open's encoding, errors and newline;
    TEXT's by default)."""
    text = text or TEXT
    if kind == "gzip":
        return gzip.open(path, "rt", **text)
    if kind == "bzip2":
        return bz2.open(path, "rt", **text)
    if kind == "xz":
        return lzma.open(path, "rt", **text)
    if kind == "zstd":
        return io.TextIOWrapper(io.BufferedReader(ZstdFrames(path)), **text)
    return open(path, **text)

class ZstdFrames(io.RawIOBase):
    """The decompressed bytes of a zstd file of one or more frames (zstd -c a b > c writes
    two; pzstd writes skippable frames between). A file that ends inside a frame raises
    EOFError, as gzip's reader does: zstandard's own stream reader returns what it has
    decompressed, and a download cut short would pass."""

    def __init__(self, path):
        self.file = None
        try:
            import zstandard
        except ImportError:
            sys.exit(f"{path}: zstd-compressed, and {sys.executable} has no zstandard to read it "
                     "(./run.sh deps installs it in .venv/)")
        READ_ERRORS.add(zstandard.ZstdError)
        self.zstandard, self.file, self.frame = zstandard, open(path, "rb"), None
        self.out, self.at = b"", 0  # decompressed bytes, and how many were read

    def readable(self):
        return True

    def readinto(self, buffer):
        while self.at == len(self.out):
            data = self.file.read(1 << 14)  # small pieces: what one gives out stays small
            if not data:
                if self.frame is not None:
                    raise EOFError("the zstd data ends inside a frame")
                return 0
            self.out, self.at = b"", 0
            while data:
                if self.frame is None:
                    self.frame = self.zstandard.ZstdDecompressor().decompressobj()
                self.out += self.frame.decompress(data)
                data = b""
                if self.frame.eof:  # the frame is whole; what follows it starts another
                    data, self.frame = self.frame.unused_data, None
        n = min(len(buffer), len(self.out) - self.at)
        buffer[:n] = memoryview(self.out)[self.at:self.at + n]
        self.at += n
        return n

    def close(self):
        if self.file is not None:
            self.file.close()
        super().close()

# What reading a file raises when it cannot be read on: compressed data corrupt or cut short
# (EOFError, zlib.error, LZMAError; gzip's BadGzipFile and bz2's errors are OSErrors; zstandard's
# ZstdError is added when a zstd file is opened), or the disk's error.
READ_ERRORS = {EOFError, OSError, zlib.error, lzma.LZMAError}

def cannot_read(where, error):
    """The error line of a file whose reading stopped at `where`: decompression reads ahead, so
    the damage is there or further on."""
    return (f"{where}: the file cannot be read on from here (corrupt, or cut short): "
            f"{type(error).__name__}: {error}")

def read_whole(path, f):
    try:
        return f.read()
    except tuple(READ_ERRORS) as e:
        sys.exit(cannot_read(path, e))

def read_text(path, kind):
    """The whole text of a text file (compressed or not), decoded as UTF-8 strictly, its line
    ends read as Python reads a text file (and datasets' text loader, run_clm.py's): \\r\\n and a
    lone \\r become \\n, with a note, so that a file saved on Windows teaches no \\r; an empty one
    is refused (a compressed file the size check could not see through)."""
    with opened(path, kind, encoding="utf-8", newline="") as f:
        text = read_whole(path, f)
    if not text:
        sys.exit(f"{path}: empty once decompressed")
    if "\r" in text:
        crlf = text.count("\r\n")
        lone = text.count("\r") - crlf
        print(f"note: {path}: {crlf} \\r\\n and {lone} lone \\r line ends read as \\n, as "
              "Python reads a text file", file=sys.stderr)
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text

def starts_array(path, kind):
    """Whether the text of `path` opens with "[" after any spaces (and byte-order mark)."""
    with opened(path, kind) as f:
        try:
            first = f.read(1)
            while first.isspace():
                first = f.read(1)
        except tuple(READ_ERRORS) as e:
            sys.exit(cannot_read(f"{path}:1", e))
    return first == "["

def numbered_lines(path, f):
    """(number, line) of each line of `f` (ended by LF, CR or CRLF), from 1; a file that cannot
    be read on is named at the line where reading stopped."""
    number = 0
    while True:
        try:
            line = f.readline()
        except tuple(READ_ERRORS) as e:
            sys.exit(cannot_read(f"{path}:{number + 1}", e))
        if not line:
            return
        number += 1
        yield number, line

def imported_pyarrow(path, what):
    try:
        import pyarrow, pyarrow.ipc, pyarrow.parquet
    except ImportError:
        sys.exit(f"{path}: {what}, and {sys.executable} has no pyarrow to read it "
                 "(./run.sh deps installs it in .venv/)")
    return pyarrow

def parquet_rows(path, columns, note):
    """table_rows of a Parquet file (the Hugging Face Hub's format for datasets), read a record
    batch at a time, of `columns` alone."""
    pa = imported_pyarrow(path, "a Parquet file")
    try:
        file = pa.parquet.ParquetFile(path)
        schema = file.schema_arrow
        batches = file.iter_batches(batch_size=BATCH_ROWS,
                                    columns=[n for n in schema.names if n in columns])
    except (OSError, ValueError, pa.ArrowException) as e:
        sys.exit(f"{path}: not a readable Parquet file: {e}")
    yield from table_rows(path, path, schema, batches, columns, note, 0)

def arrow_rows(path, columns, note):
    """table_rows of an Arrow file, or of the Arrow files of a directory datasets' save_to_disk
    wrote, in the order its state.json lists them, the rows counted through them as
    load_from_disk's Dataset[N] counts them."""
    row = 0
    for file in saved_files(path) if os.path.isdir(path) else [path]:
        pa = imported_pyarrow(file, "an Arrow file")
        try:
            source = pa.memory_map(file)
            ipc_file = source.read(len(ARROW_FILE)) == ARROW_FILE
            source.seek(0)
            if ipc_file:
                reader = pa.ipc.open_file(source)
                batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
            else:
                reader = pa.ipc.open_stream(source)
                batches = iter(reader)
        except (OSError, ValueError, pa.ArrowException) as e:
            sys.exit(f"{file}: not a readable Arrow file: {e}")
        names = [n for n in reader.schema.names if n in columns]
        pieces = (batch.slice(at, BATCH_ROWS).select(names)
                  for batch in batches for at in range(0, batch.num_rows, BATCH_ROWS))
        row = yield from table_rows(path, file, reader.schema, pieces, columns, note, row)

def saved_files(path):
    """The Arrow files of a directory that datasets' save_to_disk wrote (its state.json lists
    them); a DatasetDict's directory, or another one, is refused."""
    splits = os.path.join(path, "dataset_dict.json")
    if os.path.isfile(splits):
        try:
            with open(splits, encoding="utf-8") as f:
                names = [str(n) for n in json.load(f)["splits"]]
        except (OSError, ValueError, KeyError, TypeError) as e:
            sys.exit(f"{splits}: not datasets' list of splits: {type(e).__name__}: {e}")
        sys.exit(f"{path}: a DatasetDict that save_to_disk wrote, of splits "
                 f"{', '.join(names)}: give one split's directory "
                 f"({os.path.join(path, names[0]) if names else 'DIR/train'})")
    state = os.path.join(path, "state.json")
    if not os.path.isfile(state):
        names = os.listdir(path)
        suffix = next((x for x in (".jsonl", ".jsonl.gz", ".jsonl.zst", ".parquet", ".json",
                                   ".json.gz") if any(n.endswith(x) for n in names)), None)
        hint = (f"; to read its files, give them: {os.path.join(path, '*' + suffix)}"
                if suffix else "")
        sys.exit(f"{path}: a directory, and not one that datasets' save_to_disk wrote (it holds "
                 f"no state.json){hint}")
    try:
        with open(state, encoding="utf-8") as f:
            files = [entry["filename"] for entry in json.load(f)["_data_files"]]
        if not all(isinstance(n, str) and n == os.path.basename(n) not in ("", ".", "..")
                   and n != "state.json" for n in files):
            raise ValueError(f"the file names {files} are not names of files in the directory")
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"{state}: not the state.json of a saved dataset (a list of its _data_files): "
                 f"{type(e).__name__}: {e}")
    if not files:  # datasets 5 saves a dataset of no rows so
        sys.exit(f"{state}: lists no data files: the saved dataset has no rows")
    for name in files:
        if not os.path.isfile(os.path.join(path, name)):
            sys.exit(f"{state}: lists {name}, which {path} does not hold")
    return [os.path.join(path, name) for name in files]

TABLES = {"parquet": parquet_rows, "arrow": arrow_rows, "saved": arrow_rows}
BATCH_ROWS = 256

def table_rows(path, file, schema, batches, columns, note, row):
    """(where, record) of each row of the record `batches` of `file` (of the columns named in
    `columns`; `schema`: the file's), where "row N" counts from `row` through the input `path` (a
    saved dataset's shards one after another), as Dataset[N] indexes it; returns the count after
    the last. A record is the row as pyarrow's to_pylist gives it, as the datasets library hands
    a row to apply_chat_template (a struct's keys in the file's order, the keys a message lacked
    as None), but for values of datasets' Json feature (Arrow's arrow.json type: datasets 5
    stores a column of messages whose keys differ from message to message so), which are parsed
    as JSON, as datasets parses them. A column no option reads is never converted (pyarrow cannot
    convert a timestamp in nanoseconds without pandas). `note`: whether the other columns are
    noted in unread_fields, when the file has a row."""
    pa = sys.modules["pyarrow"]
    shard = f" (in {os.path.basename(file)})" if file != path else ""
    fields = [f for f in schema if f.name in columns and holds_json(f)]
    while True:
        try:
            batch = next(batches, None)
            rows = None if batch is None else batch.to_pylist()
        except (OSError, ValueError, pa.ArrowException) as e:  # UnicodeDecodeError too
            sys.exit(f"{path}: the rows from row {row} on cannot be read{shard}: "
                     f"{type(e).__name__}: {e}")
        if rows is None:
            return row
        for name in schema.names if note and rows else ():
            if name not in columns:
                unread_fields.setdefault(name, f"{path}:row {row}")
        for record in rows:
            for field in fields:
                try:
                    record[field.name] = json_decoded(record[field.name], field)
                except (ValueError, RecursionError) as e:  # RecursionError: nested too deep
                    sys.exit(f"{path}:row {row}: '{field.name}' holds JSON text that does not "
                             f"parse{shard}: {e}")
            yield f"row {row}", record
            row += 1

def is_json(field):
    """Whether the Arrow field is of the arrow.json extension type: a pyarrow that knows the
    type says so by its name, an older one keeps the name in the field's metadata."""
    return (getattr(field.type, "extension_name", None) == "arrow.json"
            or (field.metadata or {}).get(b"ARROW:extension:name") == b"arrow.json")

def child_fields(field):
    """The fields a field of a nested type holds (a list's item, a map's entries, a struct's)."""
    t = field.type
    return [t.field(i) for i in range(t.num_fields)]

def holds_json(field):
    """Whether the Arrow field is, or holds, one of the arrow.json extension type."""
    return is_json(field) or any(holds_json(child) for child in child_fields(field))

def json_decoded(value, field):
    """The value to_pylist gave of the Arrow field, its arrow.json texts parsed."""
    pa = sys.modules["pyarrow"]
    if value is None or not holds_json(field):
        return value
    if is_json(field):
        return json.loads(value)
    t = field.type
    if pa.types.is_struct(t):
        return {k: json_decoded(v, t.field(k)) for k, v in value.items()}
    if pa.types.is_map(t):
        return [(k, json_decoded(v, t.item_field)) for k, v in value]
    return [json_decoded(v, t.value_field) for v in value]  # a list of any kind

# The characters that stand for bytes that are not UTF-8 when a file is read with
# errors="surrogateescape" (decoding UTF-8 yields no others in this range).
UNDECODED = re.compile("[\udc80-\udcff]")

def json_lines(path, f):
    for number, line in numbered_lines(path, f):
        said = undecodable(f"{path}:{number}", line)
        if said:
            sys.exit(said)
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError) as e:  # RecursionError: nested too deep
            whole = (" (the file looks like one JSON object over several lines; JSON lines hold "
                     "one object a line, as `jq -c` writes them)") if line.strip() == "{" else ""
            sys.exit(f"{path}:{number}: not a JSON line: {e}{whole}")
        yield number, record

def undecodable(where, line):
    """The error line naming the first bytes of `line` (read with errors="surrogateescape") that
    are not UTF-8, counted in the line after any byte-order mark; None when it has none."""
    if not UNDECODED.search(line):
        return None
    raw = line.encode("utf-8", "surrogateescape")  # the bytes as they are in the file
    if raw[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return (f"{where}: UTF-16 text (its byte-order mark is 0x{raw[0]:02x} 0x{raw[1]:02x}), "
                "not UTF-8: convert it first (iconv -f UTF-16 -t UTF-8)")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return (f"{where}: not UTF-8 text: byte {e.start + 1} of the line is "
                f"0x{raw[e.start]:02x} ({e.reason})")
    return None

def not_utf8(path):
    """undecodable's error line for the first line of `path` that holds bytes that are not
    UTF-8, the lines numbered as records numbers them (in the decompressed text); None when none
    does, or when `path` is a table (Parquet, Arrow, a saved dataset). (A strict decoder's error counts from the chunk it
    was given, not the line.)"""
    kind = file_kind(path)
    if kind in TABLES:
        return None
    with opened(path, kind) as f:
        for number, line in numbered_lines(path, f):
            said = undecodable(f"{path}:{number}", line)
            if said:
                return said
    return None
)PY";

}  // namespace zt
