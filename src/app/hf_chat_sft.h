// The chat-template half of prepare-data's tokenizer step (app/hf_tokenize.h: --sft-jsonl with
// --chat-template): a conversation checked and rendered by the tokenizer's chat template, and the
// assistant turns it learns located in the rendering, as transformers' return_assistant_tokens_mask
// counts them (docs/fine-tuning.md).
#pragma once

namespace zt {

// Python definitions (functions, and constants read off the tokenizer), placed after
// app/python_step.h's opening (json, os, sys, tok, tok_dir) and before hf_tokenize.cpp's step,
// whose globals they read when called: sft (the SFT field names), string_field and counted. It
// defines
//   chat_example(path, number, messages, names, learned, tools=None) -> (ids, mask),
//   message_example(path, number, record) and chat_pair_example(path, number, record): the
//     (ids, mask) of a --messages-field record and of a --prompt-field/--response-field one,
//   conversation(path, number, record, key, tools), tools_of(path, number, record) and
//   row_tools(path, number, record) (the row's tools, its template checked),
// which report bad input with sys.exit naming the file, the line and the message.
extern const char* const kChatSftPython;

}  // namespace zt
