// The system prompt and the earlier turns a chat SFT example (app/hf_chat_sft.h) may keep in
// columns of its own: LLaMA-Factory's `system` and `history` columns, axolotl's field_system,
// OpenOrca's system_prompt (docs/fine-tuning.md, "System prompts and earlier turns").
#pragma once

namespace zt {

// Python definitions placed before hf_chat_sft.h's (which call them), after app/python_step.h's
// opening (json, sys). They read the step's `sft` options "system" and "history" (field names,
// "" when not given) and hf_chat_sft.h's json_field, at call time. It defines
//   system_first(path, number, record, messages, names, learned) -> the conversation (its
//     messages, where each is in the record, whether each is learned) opened by the record's
//     system prompt, unless it opens with a system message of its own,
//   history_turns(path, number, record) -> (messages, names, learned) of the record's earlier
//     [prompt, response] pairs: a user and an assistant turn each, the assistant turn learned,
// which report bad input with sys.exit naming the file, the line and the field.
extern const char* const kSystemHistoryPython;

}  // namespace zt
