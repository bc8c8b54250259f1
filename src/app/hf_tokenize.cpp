#include "app/hf_tokenize.h"

#include <array>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "app/cli.h"
#include "app/hf_chat_sft.h"
#include "app/hf_records.h"
#include "app/hf_sharegpt.h"
#include "app/hf_system_history.h"
#include "app/python_step.h"
#include "io/fs_util.h"
#include "io/token_dataset.h"
#include "io/tokenizer_files.h"
#include "util/error.h"

namespace zt {

namespace fs = std::filesystem;

namespace {

// The Python step, after hf_chat_sft.h's and hf_records.h's definitions. argv: tokenizer, options
// (JSON: "text_field", "" for text files; "sft": null or {"prompt", "response", "messages",
// "tools", "system", "history"} field names, "chat_template" and "end_token"; "workers", the
// processes making the examples), tokens file, loss-mask file, document-starts file, metadata file,
// inputs... It follows the opening of app/python_step.h (the tokenizer as AutoTokenizer loads it,
// special_id). A document is encoded as tokenizer(text)["input_ids"] encodes it (the tokenizer's
// special tokens added), a chat rendering without them, as apply_chat_template(tokenize=True) does.
// It writes every document's ids as little-endian uint32 to the tokens file (SFT: one byte per
// token to the loss-mask file, 1 for the response), the offset of each non-empty document's first
// token as little-endian uint64 to the document-starts file, and
// {"vocab_size", "bos_token_id", "eos_token_id", "name"} to the metadata file. Errors go to
// stderr as one line naming the file (and line, and key) and exit 1.
constexpr const char* kTokenizeScript = R"PY(
import collections, ctypes, gc, itertools, multiprocessing, signal
from array import array
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
options = json.loads(options)
field, sft, workers = options["text_field"], options["sft"], options["workers"]
eos = special_id("eos_token")
document_eos = options["document_eos"] != "off" and not sft
if document_eos and eos < 0:
    if options["document_eos"] == "on":
        sys.exit(f"{tok_dir}: --document-eos on, and the tokenizer names no eos_token (give it "
                 "one in tokenizer_config.json, or use --document-eos off)")
    print("note: the tokenizer names no eos_token: the documents end without one",
          file=sys.stderr)
    document_eos = False

def string_field(path, number, record, key):
    value = record.get(key) if isinstance(record, dict) else None
    if isinstance(value, str):
        return value
    hint = preference_hint(record)
    if isinstance(value, list) and not (sft and sft["chat_template"]):
        hint = (" (a list of messages: TRL's conversational prompt-completion, which "
                "--chat-template reads)")
    elif key == "response" and isinstance(record, dict) and "completion" in record:
        hint = " (the line has TRL's 'completion': --response-field completion)"
    elif isinstance(record, dict) and isinstance(record.get("messages"), list):
        hint = (" (the line has a 'messages' list, TRL's conversational format: "
                "--messages-field messages --chat-template)")
    elif isinstance(record, dict) and isinstance(record.get("conversations"), list):
        hint = (" (the line has a 'conversations' list, as ShareGPT's data: "
                "--messages-field conversations --chat-template)")
    elif isinstance(record, dict) and "instruction" in record and "output" in record:
        hint = (" (the line has Alpaca's fields: --prompt-field instruction,input "
                "--response-field output)")
    elif isinstance(record, dict) and isinstance(record.get("text"), str):
        hint = (" (the line has a 'text' field, plain text, which TRL's SFTTrainer learns whole: "
                "--jsonl reads it)")
    sys.exit(f"{path}:{number}: no string field '{key}'{hint}")

# --prompt-field's fields: one, or several whose texts make the prompt (Alpaca's
# instruction,input).
prompt_fields = [k.strip(" ") for k in sft["prompt"].split(",")] if sft else []

def prompt_text(path, number, record):
    """The record's prompt: its --prompt-field; of several fields, the texts that are not empty
    joined by a newline, as LLaMA-Factory joins an Alpaca instruction and its input. The first
    must be a string; a later one may also be absent or null (no text), as Alpaca's input is
    empty for an instruction that needs none."""
    first = string_field(path, number, record, prompt_fields[0])
    if len(prompt_fields) == 1:
        return first
    rest = [string_field(path, number, record, k) if record.get(k) is not None else ""
            for k in prompt_fields[1:]]
    return "\n".join(text for text in [first] + rest if text)

def ids_of(text, special):
    return tok(text, add_special_tokens=special)["input_ids"]

if sft and sft["template_text"]:  # --chat-template-file, as TRL's chat_template_path sets it
    tok.chat_template = sft["template_text"]
    template_origin = f" ({sft['template_file']})"
if sft and sft["chat_template"] and not tok.chat_template:
    sys.exit(f"{os.path.join(tok_dir, 'tokenizer_config.json')}: no chat_template to apply "
             "(and no chat_template.jinja beside it)")
if sft and sft["chat_template"]:
    choose_end_token()

def counted(offsets, special, spans):
    """Per token: 1 when it overlaps one of the character spans [a, b), as transformers'
    return_assistant_tokens_mask counts a turn's tokens (from the one holding its first
    character to the one holding its last); special tokens the tokenizer added never count."""
    mask = [0] * len(offsets)
    for a, b in spans:  # a loop per span: a few spans, thousands of tokens
        for k, (s, e) in enumerate(offsets):
            if (a <= s < b or s < a < e) and not special[k]:
                mask[k] = 1
    return mask

def pair_example(path, number, record):
    # As TRL encodes a prompt-completion pair: prompt + response as one text, with the
    # tokenizer's special tokens (its BOS, ...), then EOS unless the encoding ends with it. The
    # tokens overlapping the response and the EOS count. (Encoding the response on its own
    # would give a SentencePiece tokenizer's word-start space to its first token.)
    prompt, response = prompt_text(path, number, record), record[sft["response"]]
    encoding = tok(prompt + response, return_offsets_mapping=True,
                   return_special_tokens_mask=True)
    ids = encoding["input_ids"]
    mask = counted(encoding["offset_mapping"], encoding["special_tokens_mask"],
                   [(len(prompt), len(prompt) + len(response))])
    if not ids or ids[-1] != eos:
        ids, mask = ids + [eos], mask + [0]
    mask[-1] = 1
    return ids, mask

def document_ids(text):
    """A document's ids: tokenizer(text)'s (its special tokens: a Llama tokenizer's BOS), then
    with document_eos the tokenizer's EOS unless they end with it, as TRL's SFTTrainer appends
    eos_token to a text example and torchtitan encodes a document with eos=True. An empty text
    stays empty of EOS."""
    ids = ids_of(text, True)
    if document_eos and text and (not ids or ids[-1] != eos):
        ids.append(eos)
    return ids

def text_file(path):
    kind = file_kind(path)
    table = {"parquet": "a Parquet file", "arrow": "an Arrow file"}.get(kind)
    if table:
        sys.exit(f"{path}: {table}, not text: --jsonl reads its rows (--text-field names the "
                 "column)")
    text = read_text(path, kind)
    records = json_records_kind(text)
    if records:
        print(f"note: {path} holds {records}: --text trains on its text, braces and keys "
              "included; --jsonl reads each record's --text-field, --sft-jsonl its examples",
              file=sys.stderr)
    return document_ids(text), None

def json_records_kind(text):
    """"JSON lines" when the text's first line is a JSON object, "a JSON array of records" when
    the text is a JSON list of objects; else None (text, or JSON of another shape)."""
    start = text.lstrip("\ufeff \t\r\n")
    if start[:1] == "{":
        try:
            if isinstance(json.loads(start.split("\n", 1)[0]), dict):
                return "JSON lines"
        except ValueError:
            return None
    if start[:1] == "[":
        try:
            value = json.loads(start)
        except ValueError:
            return None
        if value and isinstance(value, list) and isinstance(value[0], dict):
            return "a JSON array of records"
    return None

def text_document(text):
    return document_ids(text), None

def jobs(path):
    """(where, function, arguments) of each document of `path`, in order: the function makes
    the document's (ids, loss mask or None); where names the file and line for errors. Reading
    the records and naming their unread fields is the main process's; the functions may run in
    workers."""
    # The fields the examples are made of (a field an option does not name is noted unread).
    turns = tuple(k for k in (sft["system"], sft["history"]) if k) if sft else ()
    if sft and sft["messages"]:
        read = (sft["messages"], sft["tools"], TEMPLATE_ARGUMENTS, *turns)
        for number, record in records(path, (), read):
            yield f"{path}:{number}", message_example, (path, number, record)
    elif sft and sft["chat_template"]:
        read = (*prompt_fields, sft["response"], sft["tools"], TEMPLATE_ARGUMENTS, *turns)
        for number, record in records(path, (), read):
            yield f"{path}:{number}", chat_pair_example, (path, number, record)
    elif sft:
        if eos < 0:
            sys.exit(f"{tok_dir}: the tokenizer names no eos_token, which ends each response "
                     "(give it one in tokenizer_config.json, or use --chat-template)")
        pair = (prompt_fields[0], sft["response"])
        for number, record in records(path, pair, (*prompt_fields, sft["response"])):
            yield f"{path}:{number}", pair_example, (path, number, record)
    elif not field:
        yield path, text_file, (path,)
    else:
        for number, record in records(path, (field,)):
            yield f"{path}:{number}", text_document, (record[field],)

def failure(where, path, error):
    """The error line of an exception raised reading or making a document at `where`."""
    if isinstance(error, SystemExit):
        return error.code
    said = not_utf8(path) if isinstance(error, UnicodeDecodeError) else None
    # The tokenizers library takes no str holding a lone surrogate, which a JSON escape of half
    # a UTF-16 pair decodes to (a whole pair is one character).
    if isinstance(error, TypeError) and "TextEncodeInput" in str(error):
        said = (f"{where}: the text holds half of a UTF-16 surrogate pair (a JSON escape such as "
                "\\ud83d without its second half), no character, which the tokenizer cannot "
                "encode")
    return said or f"{where}: the tokenizer step failed here: {type(error).__name__}: {error}"

def guarded(path):
    """The jobs of `path`, and when reading it fails, (path, None, the error line) as the
    last."""
    try:
        yield from jobs(path)
    except (SystemExit, Exception) as e:
        yield path, None, failure(path, path, e)

def batches(size):
    """(path, up to `size` jobs) of every input in order, up to the first failed read."""
    for path in inputs:
        stream = guarded(path)
        while batch := list(itertools.islice(stream, size)):
            yield path, batch
            if batch[-1][1] is None:
                return

def made(path, batch):
    """(True, (ids, mask)) of each job of the batch in order, up to a failure: (False, its
    error line), the last."""
    outcomes = []
    for where, function, arguments in batch:
        try:
            outcomes.append((False, arguments) if function is None
                            else (True, function(*arguments)))
        except (SystemExit, Exception) as e:
            outcomes.append((False, failure(where, path, e)))
        if not outcomes[-1][0]:
            break
    return outcomes

def die_with_parent(parent):
    # A worker ends with the step (which a stopped prepare-data ends with SIGTERM): it would
    # otherwise wait for work forever. PR_SET_PDEATHSIG is prctl's option 1.
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
    if os.getppid() != parent:  # the step ended before the option was set
        os._exit(1)

def settled(path, batch, future):
    """The outcomes a worker made of the batch, or, when the batch or its outcomes cannot travel
    between the processes (a record nested too deep to pickle), made here, as one process makes
    them."""
    try:
        return future.result()
    except BrokenProcessPool:
        raise
    except Exception:
        return made(path, batch)

def outcomes():
    """The outcome of every document of every input, in input order, made by `workers` forked
    processes (datasets' map(num_proc=...)) or, with one, here. The result is the same bytes
    whatever the count; a failure is the first in input order either way."""
    if workers == 1:
        for path, batch in batches(64):
            yield from made(path, batch)
        return
    # The tokenizer was loaded before the fork; its own threads must not run in the workers.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    pool, pending = None, collections.deque()
    try:
        for path, batch in batches(8):  # small batches: the workers stay evenly busy
            if pool is None:  # the workers fork at the first batch, after it was read
                gc.freeze()  # what was read (a JSON array file, whole) stays shared, uncopied
                pool = ProcessPoolExecutor(
                    workers, mp_context=multiprocessing.get_context("fork"),
                    initializer=die_with_parent, initargs=(os.getpid(),))
            pending.append((path, batch, pool.submit(made, path, batch)))
            if len(pending) >= 4 * workers:  # bounded reading ahead
                yield from settled(*pending.popleft())
        while pending:
            yield from settled(*pending.popleft())
    except BrokenProcessPool:
        sys.exit(f"{tok_path}: a tokenizer worker ended abruptly (killed, or out of memory): "
                 f"give fewer --workers than {workers}")
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)  # the batches not started are dropped

written = 0
with open(tokens_path, "wb") as out, open(mask_path, "wb") as mask_out, \
        open(starts_path, "wb") as starts_out:
    for ok, result in outcomes():
        if not ok:
            sys.exit(result)
        ids, mask = result
        if not ids:
            continue
        start = array("Q", [written])
        ids = array("I", ids)
        if sys.byteorder == "big":
            ids.byteswap()
            start.byteswap()
        start.tofile(starts_out)
        written += len(ids)
        ids.tofile(out)
        if mask is not None:
            mask_out.write(bytes(mask))
# What an unread field of LLaMA-Factory's formats (and OpenOrca's system_prompt) may hold, and
# the option that reads it (with --chat-template).
UNREAD_HINTS = {"system": ("the system prompt", "--system-field system"),
                "system_prompt": ("the system prompt", "--system-field system_prompt"),
                "history": ("the turns before the prompt", "--history-field history")}

def unread_hints():
    needs = "" if sft and sft["chat_template"] else " --chat-template"
    hints = [f"'{k}' may hold {what}: {option}{needs}"
             for k, (what, option) in sorted(UNREAD_HINTS.items())
             if k in unread_fields and not (k == "history" and sft and sft["messages"])]
    if "input" in unread_fields and "instruction" in prompt_fields:
        hints.insert(0, "Alpaca's 'input' completes its instruction: --prompt-field "
                        "instruction,input")
    return "".join(f"; {h}" for h in hints)

if unread_fields:
    listed = ", ".join(f"'{k}' ({at})" for k, at in sorted(unread_fields.items()))
    print(f"note: fields no option reads, left out of the examples: {listed} (the examples are "
          "read from --prompt-field and --response-field or --messages-field, and with "
          "--chat-template their tools from --tools-field, the chat template's arguments from "
          f"'{TEMPLATE_ARGUMENTS}', a system prompt from --system-field and earlier turns from "
          f"--history-field){unread_hints()}", file=sys.stderr)
meta = {"vocab_size": len(tok), "bos_token_id": special_id("bos_token"), "eos_token_id": eos,
        "name": os.path.basename(os.path.abspath(tok_dir or "."))}
with open(meta_path, "w", encoding="utf-8") as f:
    json.dump(meta, f)
)PY";

// The little-endian uint64 values of a file the tokenizer step wrote.
std::vector<int64_t> read_uint64_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ZT_CHECK(in.good(), "the tokenizer step wrote no '" + path + "'");
  std::vector<int64_t> values;
  std::array<unsigned char, 8> bytes{};
  while (in.read(reinterpret_cast<char*>(bytes.data()), bytes.size())) {
    uint64_t v = 0;
    for (int b = 7; b >= 0; --b) v = v << 8 | bytes[static_cast<size_t>(b)];
    ZT_CHECK(v < (uint64_t{1} << 62), "'" + path + "' holds an impossible offset " +
                                          std::to_string(v) + " at entry " +
                                          std::to_string(values.size()));
    values.push_back(static_cast<int64_t>(v));
  }
  ZT_CHECK(in.gcount() == 0, "'" + path + "' ends in a partial value");
  return values;
}

}  // namespace

int64_t prepare_hf_token_dataset(const HfTokenizeRequest& request) {
  ZT_CHECK(!request.inputs.empty(), "no input files given");
  // Records (--jsonl, --sft-jsonl) may also come from a directory datasets' save_to_disk wrote,
  // which the step reads and checks; text files are files.
  const bool records = request.sft.has_value() || !request.text_field.empty();
  for (const std::string& path : request.inputs) {
    if (records && fs::is_directory(path)) continue;
    ZT_CHECK(fs::exists(path), "input file '" + path + "' does not exist");
    ZT_CHECK(fs::is_regular_file(path),
             "input '" + path + "' is not a file" +
                 (records ? " (nor a directory that datasets' save_to_disk wrote)" : ""));
    ZT_CHECK(fs::file_size(path) > 0, "input file '" + path + "' is empty");
  }
  ZT_CHECK(fs::exists(request.tokenizer),
           "tokenizer '" + request.tokenizer + "' does not exist" + hub_id_hint(request.tokenizer));
  check_output_file_writable(request.out, request.overwrite);
  const ScratchDir scratch(temp_sibling(request.out) + ".tokenize");
  const std::string tokens_path = scratch.path() + "/tokens.u32";
  const std::string meta_path = scratch.path() + "/meta";
  const std::string mask_path = scratch.path() + "/loss_mask.u8";
  const std::string starts_path = scratch.path() + "/doc_starts.u64";
  ZT_CHECK(request.workers >= 1, "--workers must be at least 1");
  nlohmann::json options = {{"text_field", request.text_field},
                            {"sft", nullptr},
                            {"workers", request.workers},
                            {"document_eos", auto_switch_name(request.document_eos)}};
  const std::string template_file = request.sft ? request.sft->template_file : "";
  const std::string template_text =
      template_file.empty() ? "" : read_chat_template_file(template_file);
  if (request.sft)
    options["sft"] = {{"prompt", request.sft->prompt},
                      {"response", request.sft->response},
                      {"chat_template", request.sft->chat_template},
                      {"messages", request.sft->messages},
                      {"tools", request.sft->tools},
                      {"system", request.sft->system},
                      {"history", request.sft->history},
                      {"end_token", request.sft->end_token},
                      {"template_file", template_file},
                      {"template_text", template_text}};
  std::vector<std::string> args = {request.tokenizer, options.dump(), tokens_path,
                                   mask_path,         starts_path,    meta_path};
  args.insert(args.end(), request.inputs.begin(), request.inputs.end());
  run_tokenizer_step(request.python,
                     "tok_path, options, tokens_path, mask_path, starts_path, meta_path, *inputs",
                     std::string(kShareGptPython) + kSystemHistoryPython + kChatSftPython +
                         kRecordsPython + kTokenizeScript,
                     args);
  const nlohmann::json meta = read_json_file(meta_path);
  TokenizerFiles tokenizer = read_tokenizer_files(request.tokenizer);
  if (!template_text.empty()) replace_chat_template(tokenizer, template_text, request.tokenizer);
  tokenizer.bos_token_id = meta.at("bos_token_id").get<int64_t>();
  tokenizer.eos_token_id = meta.at("eos_token_id").get<int64_t>();
  TokenDatasetWriter writer(request.out, meta.at("vocab_size").get<int64_t>(),
                            "hf:" + meta.at("name").get<std::string>(), request.overwrite);
  writer.set_tokenizer_files(std::move(tokenizer));
  for (const int64_t start : read_uint64_file(starts_path)) writer.add_document_start(start);
  std::ifstream in(tokens_path, std::ios::binary), mask_in(mask_path, std::ios::binary);
  std::vector<uint32_t> chunk(1 << 20);
  std::vector<uint8_t> mask(request.sft ? chunk.size() : 0);
  while (in) {
    in.read(reinterpret_cast<char*>(chunk.data()),
            static_cast<std::streamsize>(chunk.size() * sizeof(uint32_t)));
    const auto n = static_cast<int64_t>(in.gcount() / sizeof(uint32_t));
    if (request.sft) {
      mask_in.read(reinterpret_cast<char*>(mask.data()), static_cast<std::streamsize>(n));
      ZT_CHECK(mask_in.gcount() == n,
               "the tokenizer step wrote fewer loss-mask values than tokens");
    }
    writer.append(chunk.data(), n, "tokenizer '" + request.tokenizer + "'",
                  request.sft ? mask.data() : nullptr);
  }
  ZT_CHECK(!request.sft || mask_in.peek() == std::char_traits<char>::eof(),
           "the tokenizer step wrote more loss-mask values than tokens");
  ZT_CHECK(writer.size() > 0,
           request.sft ? "the inputs hold no SFT example" : "the inputs hold no text to tokenize");
  writer.finish();
  return writer.size();
}

}  // namespace zt
