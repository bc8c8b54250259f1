// The reading half of prepare-data's tokenizer step (app/hf_tokenize.h: --jsonl, --sft-jsonl and
// --text with --tokenizer): the records of an input file, numbered for error messages, whatever
// form a dataset comes in (docs/fine-tuning.md, "Preparing data").
#pragma once

namespace zt {

// Python definitions, placed after app/python_step.h's opening (json, os, sys) and before
// hf_tokenize.cpp's step, whose string_field they call. It defines
//   file_kind(path) -> "parquet", "gzip", "bzip2", "xz", "zstd" or "text", from the first bytes;
//   opened(path, kind, **text) -> a text stream of the file, decompressed;
//   records(path, keys, read=None) -> (where, record) of each JSON line, JSON array element or
//     Parquet row, `keys` checked to hold strings; where is the line number, "element N" or
//     "row N"; with `read` (the fields the examples are made of) the others are noted in
//   unread_fields, {field: where it was first seen};
//   read_text(path, kind) -> a text file's whole text (UTF-8, strict);
//   not_utf8(path) -> the error line naming the first bytes of a file that are not UTF-8,
// which report bad input with sys.exit naming the file (and the line or row).
extern const char* const kRecordsPython;

}  // namespace zt
