#include "app/hf_sharegpt.h"

namespace zt {

const char* const kShareGptPython = R"PY(
# ShareGPT's speakers and the roles they are: LLaMA-Factory's tags (human, gpt, system,
# observation for a tool result, function_call below) and the names axolotl and Unsloth also
# map (user, assistant, tool).
SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                  "system": "system", "observation": "tool", "tool": "tool"}
# LLaMA-Factory's assistant turn that calls tools: its value is the JSON of a call {"name",
# "arguments"}, or of a list of them (parallel calls).
SHAREGPT_CALL = "function_call"

def sharegpt_calls(where, value):
    """A function_call's value as TRL's tool_calls: each call {"type": "function", "function":
    {"name", "arguments"}}, the arguments as the value holds them."""
    try:
        calls = json.loads(value) if isinstance(value, str) else value
    except ValueError as e:
        sys.exit(f"{where}: the value of a function_call is not JSON: {e}")
    calls = calls if isinstance(calls, list) else [calls]
    if not calls or any(not isinstance(c, dict) or call_name(c) is None
                        or set(c) != {"name", "arguments"} for c in calls):
        sys.exit(f"{where}: the value of a function_call is not a call "
                 '{"name": ..., "arguments": {...}}, nor a list of them (LLaMA-Factory\'s format)')
    return [{"type": "function", "function": c} for c in calls]

def is_sharegpt(m):
    """Whether the message is ShareGPT's: it has a "from" and no "role" (keys holding null read as
    absent, as an Arrow struct column gives every message every key)."""
    return (isinstance(m, dict) and m.get("from") is not None and m.get("role") is None)

def read_sharegpt(where, m):
    """The message in TRL's form when it is ShareGPT's {"from", "value"[, "weight"]}: its speaker
    as the role (SHAREGPT_ROLES; a function_call as an assistant turn of tool_calls), its value as
    the content; OpenAI's weight, which axolotl also reads, kept, but for a weight of 0 on a turn
    that is not the assistant's (SlimOrca's human turns), which is never learned anyway. Any
    other message as given."""
    if not is_sharegpt(m):
        return m
    m = {k: v for k, v in m.items() if v is not None}
    speaker = m.get("from")
    extra = sorted(set(m) - {"from", "value", "weight"})
    if extra:
        sys.exit(f"{where} has keys {extra}; a ShareGPT message holds from and value "
                 "(and an assistant turn's weight)")
    if "value" not in m:
        sys.exit(f"{where} is a ShareGPT message (it has 'from') with no 'value'")
    if speaker == SHAREGPT_CALL:
        turn = {"role": "assistant", "tool_calls": sharegpt_calls(where, m["value"])}
    elif isinstance(speaker, str) and speaker in SHAREGPT_ROLES:
        turn = {"role": SHAREGPT_ROLES[speaker], "content": m["value"]}
    else:
        sys.exit(f"{where} is from {json.dumps(speaker, default=str)}; a ShareGPT message is from "
                 f"{', '.join([*SHAREGPT_ROLES, SHAREGPT_CALL])}")
    if "weight" in m and (turn["role"] == "assistant" or m["weight"] != 0):
        turn["weight"] = m["weight"]
    return turn

def sharegpt_tools(messages, tools):
    """The tools of a ShareGPT conversation, each bare function schema {"name", "description",
    "parameters"} wrapped as {"type": "function", "function": schema}, as LLaMA-Factory's tool
    formats wrap the schemas of its data and as callers give them at inference; the tools of any
    other conversation as given."""
    if not tools or not isinstance(messages, list) or not any(map(is_sharegpt, messages)):
        return tools
    return [t if "function" in t else {"type": "function", "function": t} for t in tools]
)PY";

}  // namespace zt
