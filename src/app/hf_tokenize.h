// prepare-data --tokenizer: text files or JSON-lines documents (or Parquet rows, and compressed
// files: app/hf_records.h) tokenized by a Hugging Face tokenizer (a directory with tokenizer.json,
// or the file) as transformers' AutoTokenizer loads it, in a Python step (app/python_step.h;
// ./run.sh deps installs transformers into .venv/). Each document is encoded with the tokenizer's
// own special tokens (a Llama tokenizer's BOS, ...) as transformers' run_clm.py encodes it, then
// the tokenizer's EOS (document_eos), and the documents are concatenated in order. The dataset is
// labelled "hf:<name>" and stores the tokenizer files and its bos/eos ids (io/tokenizer_files.h).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "app/cli.h"

namespace zt {

// SFT examples (--sft-jsonl): each JSON line's prompt and response, encoded as TRL encodes a
// prompt-completion pair: prompt + response as one text (with the tokenizer's special tokens: a
// Llama tokenizer's BOS), then the tokenizer's EOS; the dataset's /loss_mask is 1 over the tokens
// overlapping the response and the EOS, 0 before, so only the response is learned.
// With chat_template (--chat-template), transformers renders each example with the tokenizer's
// chat template (tokenizer_config.json): the user turn with the generation prompt is masked, the
// tokens overlapping the rest of the conversation (the response and whatever closes its turn)
// count, as transformers' return_assistant_tokens_mask counts them; no special token is added
// beyond what the template writes, but for end_token's after a last reply it leaves unclosed.
// With messages (--messages-field, needs chat_template) each line holds a conversation instead:
// a list of {"role": system|user|assistant|tool, "content"} (TRL's conversational format, with
// its tool calls), rendered whole by the template; every assistant turn (a reply or tool calls)
// counts, everything else (tool results too) is masked. With chat_template, the line's `tools`
// field (TRL's tools column) is handed to the template when it has one.
struct SftFields {
  std::string prompt = "prompt", response = "response";
  bool chat_template = false;
  std::string messages;         // "" : prompt/response lines
  std::string tools = "tools";  // the field listing the tools (chat_template)
  // --chat-template-file: a Jinja file rendered in place of the tokenizer's templates, as TRL's
  // chat_template_path sets it; the dataset's tokenizer files then carry it (replace_chat_template
  // in io/tokenizer_files.h). "": the tokenizer's own.
  std::string template_file;
  // With chat_template, "" when not given: the field of a system prompt opening the conversation
  // (LLaMA-Factory's system column), and of the [prompt, response] pairs before a prompt string
  // (its alpaca history column), whose responses are learned.
  std::string system, history;
  // With chat_template: the token appended after a conversation's last reply, and counted, when
  // the template writes nothing but whitespace after it (GLM's), so that the model learns to
  // stop: "auto", the tokenizer's EOS (LLaMA-Factory's efficient_eos); "off", none; else a token
  // the tokenizer holds whole. A named token is refused for a template that closes its replies.
  std::string end_token = "auto";
};

struct HfTokenizeRequest {
  std::string tokenizer;            // tokenizer.json or a directory holding it
  std::vector<std::string> inputs;  // text files (one document each), JSON lines or Parquet
  std::string text_field;           // JSON lines: the field holding each document; "" for text
  std::optional<SftFields> sft;     // JSON lines of SFT examples (text_field unused)
  // Text documents end with the tokenizer's EOS unless they end with it (on; auto: when the
  // tokenizer names one, else a note), as TRL's SFTTrainer ends a text example and torchtitan a
  // document; off: tokenizer(text) alone, as transformers' run_clm.py. SFT examples: unused.
  AutoSwitch document_eos = AutoSwitch::kAuto;
  std::string python;  // interpreter with transformers
  // Processes that encode the documents (datasets' map(num_proc=N)): the reading and the writing
  // stay in one; the dataset is the same bytes whatever the count.
  int workers = 1;
  std::string out;
  bool overwrite = false;
};

// Returns the number of tokens written. Errors (no tokenizers library, a bad tokenizer file, a
// JSON line or Parquet row without its field) name the file, the line or row and the key; nothing
// is left at `out`.
int64_t prepare_hf_token_dataset(const HfTokenizeRequest& request);

}  // namespace zt
