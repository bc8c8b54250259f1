#include "app/hf_system_history.h"

namespace zt {

const char* const kSystemHistoryPython = R"PY(
def system_first(path, number, record, messages, names, learned):
    """The conversation with the record's --system-field text as a system message before it,
    as LLaMA-Factory's system column and axolotl's field_system place it. A conversation that
    opens with a system message keeps its own (LLaMA-Factory's system turn overrides the column);
    a field that is absent, null or empty adds none, so the chat template's default system
    prompt, if it has one, stays (Qwen2.5's), as apply_chat_template renders messages without
    one."""
    key = sft["system"]
    if not key or (messages and messages[0]["role"] == "system"):
        return messages, names, learned
    value = record.get(key) if isinstance(record, dict) else None
    if value is None or value == "":
        return messages, names, learned
    if not isinstance(value, str):
        sys.exit(f"{path}:{number}: '{key}' is not a string (--system-field names the field "
                 "that holds the system prompt)")
    return ([{"role": "system", "content": value}] + messages, [f"'{key}'"] + names,
            [False] + learned)

def history_turns(path, number, record):
    """(messages, names, learned) of the record's --history-field: a list of [prompt, response]
    pairs of strings, the turns before the example's prompt (LLaMA-Factory's history column of
    an alpaca dataset, or a string holding its JSON, as a Parquet column may). Each pair is a
    user turn and an assistant turn, and the assistant turn is learned, as LLaMA-Factory learns
    the history's responses. Absent, null, "" or [] holds no turn."""
    key = sft["history"]
    value = json_field(path, number, record, key) if key else None
    if value is None:
        return [], [], []
    if not isinstance(value, list):
        sys.exit(f"{path}:{number}: '{key}' is not a list of [prompt, response] pairs "
                 "(--history-field: the turns before the prompt, as LLaMA-Factory's history)")
    messages, names, learned = [], [], []
    for i, pair in enumerate(value):
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2
                and all(isinstance(text, str) for text in pair)):
            sys.exit(f"{path}:{number}: '{key}'[{i}] is not a [prompt, response] pair of "
                     "strings")
        messages += [{"role": "user", "content": pair[0]},
                     {"role": "assistant", "content": pair[1]}]
        names += [f"'{key}'[{i}][0]", f"'{key}'[{i}][1]"]
        learned += [False, True]
    return messages, names, learned
)PY";

}  // namespace zt
