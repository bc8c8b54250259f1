// ShareGPT conversations for chat SFT (app/hf_chat_sft.h): a message {"from", "value"}, as
// LLaMA-Factory's sharegpt format, axolotl's chat_template datasets and Unsloth's
// standardize_sharegpt read them, becomes TRL's {"role", "content"} (docs/fine-tuning.md).
#pragma once

namespace zt {

// Python definitions placed before hf_chat_sft.h's (which call them), after app/python_step.h's
// opening (json, sys, call_name). It defines
//   is_sharegpt(message) -> whether it is ShareGPT's,
//   read_sharegpt(where, message) -> the message in TRL's form when it is ShareGPT's (it has
//     "from" and no "role"), else the message as given,
//   sharegpt_tools(messages, tools) -> the tools, bare function schemas wrapped in OpenAI's form
//     when the messages are ShareGPT's,
// which report bad input with sys.exit naming `where` (the file, the line and the message).
extern const char* const kShareGptPython;

}  // namespace zt
