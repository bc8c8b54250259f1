#include "app/hf_chat_sft.h"

namespace zt {

const char* const kChatSftPython = R"PY(
# The keyword arguments of the example being made for its chat template (TRL's
# chat_template_kwargs column, template_arguments), set by row_tools: every rendering of the
# example gets them, as TRL hands them to each apply_chat_template.
row_arguments = {}
# " (FILE)" when --chat-template-file replaced the tokenizer's template, for the errors.
template_origin = ""

def check_template_chosen(path, number, tools):
    """transformers renders a conversation with the tokenizer's chat template named "tool_use"
    where it is given tools and there is one, else with "default": named templates that hold
    neither leave no template for the line, which is refused naming them."""
    named = tok.chat_template
    if (not isinstance(named, dict) or "default" in named
            or (tools is not None and "tool_use" in named)):
        return
    sys.exit(f"{path}:{number}: the chat templates of {tok_dir} are named "
             f"{', '.join(sorted(named))}, none 'default': transformers renders a conversation "
             "without tools with 'default', one with tools with 'tool_use'")

def render(path, number, messages, tools=None, **kwargs):
    try:
        return tok.apply_chat_template(messages, tools=tools, tokenize=False, **row_arguments,
                                       **kwargs)
    except Exception as e:
        roles = ", ".join(m["role"] for m in messages)
        sys.exit(f"{path}:{number}: the chat template{template_origin} failed on the turns "
                 f"({roles}): {type(e).__name__}: {e}")

# The ids of the tokens the tokenizer adds whole (its special tokens and added tokens): read once,
# as transformers builds the dict anew at each read.
ADDED_IDS = frozenset(tok.added_tokens_decoder)
ADDED_TEXTS = frozenset(t.content for t in tok.added_tokens_decoder.values())

# Stand in for a reply, and for a function name, to find where the template puts them (no
# template writes these; a name is ASCII, which every tojson filter leaves as it is).
TURN_PROBE = "\u2063zerotrain-reply\u2063"
NAME_PROBE = "zerotrain_probe_name"

# The id appended after a conversation's last reply, and counted, when the chat template writes
# nothing but whitespace after it (choose_end_token); None: nothing is appended.
END_ID = None

def reply_closing():
    """What the chat template writes after a conversation's last reply, judged on a user turn and
    a probe reply (after a system message, for a template that needs one); None when it renders
    neither or drops the reply."""
    turns = [{"role": "user", "content": "?"}, {"role": "assistant", "content": TURN_PROBE}]
    for opening in ([], [{"role": "system", "content": "?"}]):
        try:
            whole = tok.apply_chat_template(opening + turns, tokenize=False)
        except Exception:
            continue
        at = whole.rfind(TURN_PROBE) if isinstance(whole, str) else -1
        return whole[at + len(TURN_PROBE):] if at >= 0 else None
    return None

def choose_end_token():
    """Sets END_ID once, before the workers fork: a template that writes nothing but whitespace
    after the last reply (GLM's) counts no token teaching the model to stop, so --chat-end-token's
    is appended (auto: the tokenizer's EOS, as LLaMA-Factory's efficient_eos; off: none, noted).
    A token named for a template that closes its replies is refused."""
    choice, closing = sft["end_token"], reply_closing()
    if closing is None or closing.strip():
        if choice not in ("auto", "off"):
            what = (f"closes a reply with {closing!r}" if closing is not None else
                    "does not render a user turn and a reply, so it cannot be told how it closes "
                    "one")
            sys.exit(f"--chat-end-token {choice!r}: the chat template{template_origin} {what}; "
                     "the option names the token to append for a template that writes nothing "
                     "after the last reply")
        return
    global END_ID
    said = (f"the chat template{template_origin} writes nothing"
            + (" but whitespace after a conversation's last reply (no EOS closes it)" if closing
               else " after a conversation's last reply (its turn ends where the next one "
               "opens, as GLM's does)"))
    if choice == "off" or (choice == "auto" and tok.eos_token_id is None):
        why = ("the tokenizer names no eos_token (name one with --chat-end-token)"
               if choice == "auto" else "--chat-end-token off")
        print(f"note: {said}: no counted token teaches the model to stop, as {why}",
              file=sys.stderr)
        return
    END_ID = tok.eos_token_id if choice == "auto" else tok.get_vocab().get(choice)
    if END_ID is None:
        sys.exit(f"--chat-end-token {choice!r} is not a token of {tok_dir}'s vocabulary (give "
                 "one the tokenizer holds whole, as GLM's <|user|>)")
    print(f"note: {said}: {tok.convert_ids_to_tokens(END_ID)!r} is appended after each "
          "conversation's last reply and counted, so that the model learns to stop "
          "(--chat-end-token)", file=sys.stderr)

def probe_names(calls, every):
    """A copy of the tool calls (or schemas) with NAME_PROBE as the last one's name, or every
    one's."""
    calls = json.loads(json.dumps(calls))
    for call in calls if every else calls[-1:]:
        (call["function"] if isinstance(call.get("function"), dict) else call)["name"] = NAME_PROBE
    return calls

def with_probes(message):
    """(the assistant message with TURN_PROBE as its content, when it has one or makes no calls,
    and NAME_PROBE as the function name of its last tool call, when it makes calls; the probe
    that comes last in the turn). A template may leave the content of a turn of calls out, and
    the name is in every template written for calls."""
    calls = message.get("tool_calls")
    probed = dict(message, tool_calls=probe_names(calls, False)) if calls else dict(message)
    if content_text(message.get("content")) or not calls:
        probed["content"] = TURN_PROBE
    return probed, NAME_PROBE if calls else TURN_PROBE

def first_probe(text):
    """Where the first probe (TURN_PROBE or NAME_PROBE) is in `text`; -1 when neither is."""
    return min((p for p in (text.find(TURN_PROBE), text.find(NAME_PROBE)) if p >= 0), default=-1)

def turn_start(path, number, messages, i, tools, head, inside, first, alone):
    """Where assistant turn i starts in the whole rendering when the turns before it render
    differently once later turns follow (Qwen3 keeps the reasoning of a turn after the last user
    message and drops it once another user message follows; Mistral v0.3 writes the system
    message and the tools before the last user message). The turn opens as it does when the
    conversation ends with it (`alone`: the turns before it and it, probes in): with what the
    template writes between the turns before (`before`) and the first probe. It starts after
    the generation prompt (`head`: the turns before it rendered with the prompt) when that stands
    right before the first probe (at `first` of `inside`) but for what the opening ends with
    (Qwen3's empty reasoning block): a prompt found further back lies in an earlier turn (a
    reply whose "<think>" was never closed). Else after the part of the opening a plain reply's
    opening shares with the prompt: QwQ's and DeepSeek-R1's prompt goes on with "<think>\n",
    which a reply starts with at generation and a turn already written leaves out (a turn of
    calls shares "<t" more with it: "<tool_call>"); a template without a generation prompt
    (Mistral) opens a turn of calls with "[TOOL_CALLS]", which counts. None when it cannot be
    told."""
    before = render(path, number, messages[:i], tools)
    prompt = head[len(before):] if head.startswith(before) else ""
    start = first_probe(alone)
    # The opening the turn has at the end of a conversation, or, when that one goes on past the
    # one it has in the conversation (Qwen3 given enable_thinking=False gives the last turn an
    # empty reasoning block), the latter.
    opening = alone[len(before):start] if alone.startswith(before) and start >= 0 else None
    within = inside[len(before):first] if inside.startswith(before) else None
    if opening is not None and not inside.endswith(opening, 0, first):
        opening = within if within and opening.startswith(within) else None
    if prompt:
        found = inside.rfind(prompt, 0, first)
        if found >= 0 and (opening or "").endswith(inside[found + len(prompt):first]):
            return found + len(prompt)
    if opening is None:
        return None
    prompted = len(os.path.commonprefix([opening, prompt]))
    if prompted and not alone.startswith(TURN_PROBE, start):  # a turn of calls, first
        reply = render(path, number, messages[:i] + [{"role": "assistant",
                                                      "content": TURN_PROBE}] + messages[i + 1:],
                       tools)
        plain = reply[len(before):] if reply.startswith(before) else ""
        prompted = min(prompted, len(os.path.commonprefix([plain, prompt])))
    if prompt and not prompted:
        return None
    return first - len(opening) + prompted

def turn_end(whole, probe, inside, at, alone):
    """Where assistant turn i ends in the whole rendering, for templates that render an earlier
    assistant turn unlike the last one (Qwen3 drops an earlier turn's reasoning and gives the
    turns after the last user message an empty reasoning block; Phi-3 ends a conversation with
    EOS, not with the text that closes a turn). `alone`: the conversation through turn i, its
    probes in (`probe` the last). What follows the last probe (at `at` of `inside`) follows the
    reply, as the template renders it, in the whole conversation. The turn ends after the part
    of that text that also closes the probe at the end of a conversation (chat_example moves an
    end inside a token the tokenizer adds whole back to its start). None when it cannot be
    told, as when a token the tokenizer adds whole that closes the turn there comes later here
    (Nemotron-Nano-v2 closes a turn of calls with "</TOOLCALL><SPECIAL_12>" at the end and
    "</TOOLCALL>\n<SPECIAL_12>" inside): the end would fall short of it. (Phi-3's EOS, which
    closes only a conversation, is not in what follows a turn.)"""
    last = alone.rfind(probe)
    after = inside[at + len(probe):]
    if last < 0 or not whole.endswith(after):
        return None
    closing = alone[last + len(probe):]
    shared = len(os.path.commonprefix([closing, after]))
    for token in ADDED_TEXTS:
        found = closing.find(token)
        if found >= 0 and found + len(token) > shared and token in after[
                max(shared - len(token), 0):shared + len(closing)]:
            return None
    return len(whole) - len(after) + shared

def located_turn(path, number, whole, messages, i, tools, head, through, name):
    """(start, end) of assistant turn i (`name` in the record) in the whole rendering, when the
    rendering of the turns before it with the generation prompt (`head`), or of the turns
    through it (`through`), is not a prefix of the whole one: with the reply replaced by probes,
    the conversation must render as the whole one up to the first, and turn_start and turn_end
    tell what they replace."""
    message, probe = with_probes(messages[i])
    inside = render(path, number, messages[:i] + [message] + messages[i + 1:], tools)
    alone = render(path, number, messages[:i] + [message], tools)
    first, at = first_probe(inside), inside.find(probe)
    if 0 <= first <= at and whole.startswith(inside[:first]):
        start = (len(head) if whole.startswith(head)
                 else turn_start(path, number, messages, i, tools, head, inside, first, alone))
        end = (len(through) if whole.startswith(through)
               else turn_end(whole, probe, inside, at, alone))
        # A prompt found whole before the turn may end inside the reply, which then opens with
        # what the prompt goes on with (Olmo-3-Think's "<think>"): the turn starts after it.
        if (start is not None and end is not None and at <= end and start <= end and
                (start <= first or whole.startswith(head))):
            return start, end
    sys.exit(f"{path}:{number}: the chat template{template_origin} "
             f"renders {name} (assistant), or the turns "
             "before it, inside the conversation unlike it renders them at its end: the turn "
             "cannot be located")

def unrendered_calls(messages, tools, rendering):
    """The index of the first turn whose tool calls the template leaves out of `rendering`
    (messages, tools) -> text, given NAME_PROBE as their names (a name that the text holds
    anyway would not tell); None when it renders them all."""
    for i, message in enumerate(messages):
        calls = message.get("tool_calls")
        probed = dict(message, tool_calls=probe_names(calls, True)) if calls else None
        if probed and rendering(messages[:i] + [probed] + messages[i + 1:],
                                tools).count(NAME_PROBE) < len(calls):
            return i
    return None

def call_contents(path, number, messages, tools):
    """(the messages, a turn of calls without content given "" (Qwen3's template fails on none;
    most render both alike), or none when the template leaves the calls out with "" and renders
    them with none, as DeepSeek-R1's does (its turn of calls is the one whose content is none),
    and as transformers renders a null content; unrendered_calls of those messages; the error
    the template raised given none, when neither renders the calls), for check_tools_rendered."""
    empty = [dict(m, content="") if m["content"] is None else m for m in messages]
    nones = [dict(m, content=None) if m.get("tool_calls") and not content_text(m["content"])
             else m for m in messages]
    left_out = unrendered_calls(empty, tools, lambda m, t: render(path, number, m, t))
    if empty == nones or left_out is None:
        return empty, left_out, None
    try:
        if unrendered_calls(nones, tools, lambda m, t: tok.apply_chat_template(
                m, tools=t, tokenize=False, **row_arguments)) is None:
            return nones, None, None
    except Exception as e:
        return empty, left_out, f"{type(e).__name__}: {e}"
    return empty, left_out, None

def check_tools_rendered(path, number, messages, tools, names, left_out, failed_none):
    """A template written without tool calls leaves the tools out and renders a call as an empty
    reply (SmolLM2's, Phi-3's): with NAME_PROBE as every tool's name, and then as the names of
    each turn's calls, the rendering must hold it once for each (`left_out`: unrendered_calls of
    the messages). `failed_none`: the error the template raised given a turn of calls whose
    content is none."""
    if tools and render(path, number, messages,
                        probe_names(tools, True)).count(NAME_PROBE) < len(tools):
        sys.exit(f"{path}:{number}: the chat template{template_origin} "
                 f"does not render the tools (its rendering "
                 "leaves their names out): it is not written for tool calls (give one that is "
                 "with --chat-template-file)")
    if left_out is not None:
        also = f"; given a null content instead, it fails: {failed_none}" if failed_none else ""
        sys.exit(f"{path}:{number}: the chat template{template_origin} "
                 f"does not render the tool_calls of "
                 f"{names[left_out]} (its rendering leaves their names out): it is not written for "
                 f"tool calls{also} (give one that is with --chat-template-file)")

def check_system_rendered(path, number, messages, tools, names, whole):
    """A template may leave a system message out of a conversation that ends with an assistant
    turn (Mistral Nemo's writes it into the last user turn only when that turn ends the
    conversation): the model would learn the replies without ever seeing it. Its text must be
    in the rendering, or, as the template may change it (trim it, quote it), a probe given as
    its content."""
    for i, message in enumerate(messages):
        if message["role"] != "system":
            continue
        text = content_text(message["content"]).strip()  # empty: the probe tells
        if not (text and text in whole) and TURN_PROBE not in render(
                path, number, messages[:i] + [dict(message, content=TURN_PROBE)] +
                messages[i + 1:], tools):
            sys.exit(f"{path}:{number}: the chat template{template_origin} "
                     f"leaves {names[i]} (system) out of "
                     "the conversation, which the model would never see; put its text in the "
                     "first user message")

def check_parts_rendered(path, number, messages, tools, names):
    """A message whose content is a list of text parts is rendered by the template as the text
    of its parts (Mistral Small 3.2's reads them; Gemma 3's trims each), or the model would learn
    from what the template makes of a list: Python's printing of it (Llama 3.1's; a tool result
    in Mistral Small's), its first part alone (the system message in Mistral Small's and Gemma
    3's), or an error (SmolLM2's, Qwen2.5's, Qwen3's). Probe parts in place of the message's, as
    many, must render as the string of them all does, every other message's parts given as their
    text, a turn of calls without content "" (as call_contents first renders it), so that a
    template failing on lists names the first message given so."""
    as_text = [dict(m, content="" if m["content"] is None else content_text(m["content"]))
               for m in messages]
    for i, message in enumerate(messages):
        if not isinstance(message["content"], list):
            continue
        def with_content(content):
            return as_text[:i] + [dict(message, content=content)] + as_text[i + 1:]
        probes = [f"\u2063zerotrain-part-{k}\u2063" for k in range(len(message["content"]))]
        want = render(path, number, with_content("".join(probes)), tools)
        try:
            got = tok.apply_chat_template(
                with_content([{"type": "text", "text": p} for p in probes]), tools=tools,
                tokenize=False, **row_arguments)
            failed = ""
        except Exception as e:
            got, failed = None, f" (it fails: {type(e).__name__}: {e})"
        if got != want:
            sys.exit(f"{path}:{number}: the chat template{template_origin} "
                     f"does not render the list of content "
                     f"parts of {names[i]} ({message['role']}) as their text{failed}: write "
                     "the text as a string")

def chat_example(path, number, messages, names, learned, tools=None):
    """(ids, mask) of the conversation the tokenizer's chat template renders (`names`: where each
    message is in the record, for errors; with the record's tools, TRL's tools column): each
    assistant turn i that is `learned[i]` (its content or tool calls, and whatever closes it)
    counts; everything before it, up to and including the generation prompt, is masked, and so
    are tool results. Assistant turn i spans the characters
    from the end of the rendering of messages[:i] with the generation prompt to the end of the
    rendering of messages[:i + 1], when both are prefixes of the whole conversation's rendering;
    else located_turn finds it. END_ID follows a learned last reply, counted (choose_end_token)."""
    check_parts_rendered(path, number, messages, tools, names)
    messages, left_out, failed_none = call_contents(path, number, messages, tools)
    check_tools_rendered(path, number, messages, tools, names, left_out, failed_none)
    whole = render(path, number, messages, tools)
    check_system_rendered(path, number, messages, tools, names, whole)
    spans = []
    for i, message in enumerate(messages):
        if not learned[i]:
            continue
        head = render(path, number, messages[:i], tools, add_generation_prompt=True)
        through = whole if i + 1 == len(messages) else render(path, number, messages[:i + 1],
                                                              tools)
        spans.append((len(head), len(through))
                     if whole.startswith(head) and whole.startswith(through)
                     else located_turn(path, number, whole, messages, i, tools, head, through,
                                       names[i]))
    # One encoding of the whole conversation, as apply_chat_template(tokenize=True) encodes it
    # (no special tokens added: the template writes them).
    encoding = tok(whole, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = encoding["input_ids"], encoding["offset_mapping"]
    # A turn's closing found as a common prefix can run into the opening of the next turn when
    # it starts like the end of a conversation (Phi-3's "<|user|>" and "<|endoftext|>" share
    # "<|"); no turn ends inside a token the tokenizer adds whole, so such an end moves back to
    # that token's start.
    added = [(s, e) for (s, e), token in zip(offsets, ids) if token in ADDED_IDS]
    spans = [(a, min([s for s, e in added if s < b < e], default=b)) for a, b in spans]
    mask = counted(offsets, [0] * len(ids), spans)
    if END_ID is not None and learned[-1]:  # the template leaves the last reply unclosed
        return ids + [END_ID], mask + [1]
    return ids, mask

ROLES = ("system", "user", "assistant", "tool")
# The keys a message of each role may hold beside role and content: TRL's tool-calling format,
# the reasoning Qwen3's template reads, and the weight of OpenAI's fine-tuning format (1 or 0:
# whether the turn is learned; it is not handed to the template). Others (thinking) change what
# templates render, so they are refused.
EXTRA_KEYS = {"assistant": ("tool_calls", "reasoning_content", "weight"),
              "tool": ("name", "tool_call_id")}
# What a message key or role refused means, where a known format writes it.
KEY_HINTS = {
    "name": "OpenAI's participant name, which the chat templates of Llama, Qwen, Mistral, "
            "SmolLM2 and Phi-3 leave out: put it in the content",
    "function_call": "OpenAI's deprecated form of a call: write it as tool_calls",
    "weight": "OpenAI's weight marks an assistant turn learned or not",
}
ROLE_HINTS = {
    "developer": "OpenAI's developer message: chat templates call it system",
    "function": "OpenAI's deprecated function result: write it as a tool message",
}

def message_weight(where, m):
    """Whether the assistant message is learned: OpenAI's fine-tuning format marks a turn not
    learned with "weight": 0 (1, or no weight, learns it; nothing else is allowed)."""
    weight = m.get("weight", 1)
    if type(weight) not in (int, float) or weight not in (0, 1):
        sys.exit(f"{where}: 'weight' is {json.dumps(weight, default=str)}; OpenAI's "
                 "fine-tuning format allows 0 (the turn is not learned) or 1")
    return weight == 1

def text_parts(where, parts):
    """The content given as OpenAI's list of parts, checked: text parts ({"type": "text", "text":
    ...}), a key holding null read as absent (an Arrow struct gives every part every key), at least
    one. The list goes to the template as it is, as TRL hands it on; check_parts_rendered tells
    whether the template reads it."""
    parts = [{k: v for k, v in p.items() if v is not None} if isinstance(p, dict) else p
             for p in parts]
    for i, part in enumerate(parts):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind != "text":
            what = f"a part of type {json.dumps(kind)}" if isinstance(kind, str) else "not a part"
            sys.exit(f"{where}: content[{i}] is {what}; chat SFT reads text parts, "
                     '{"type": "text", "text": ...}, of a text-only model')
        if not isinstance(part.get("text"), str):
            sys.exit(f"{where}: content[{i}] is a text part with no string 'text'")
        extra = sorted(set(part) - {"type", "text"})
        if extra:
            sys.exit(f"{where}: content[{i}] is a text part with keys {extra} besides type and "
                     "text, which chat templates do not read")
    if not parts:
        sys.exit(f"{where}: content is an empty list of parts")
    return parts

def content_text(content):
    """A message's text: its content, or the text of its parts joined."""
    return "".join(p["text"] for p in content) if isinstance(content, list) else content

def checked_message(where, m, previous):
    """The message, checked: a role, a string content or a list of text parts (text_parts; an
    assistant turn that makes tool calls may leave it out, or hold null; call_contents tells how
    it is rendered), only the keys its role holds; a tool result
    follows a turn that made calls, or another result. `previous`: the message before. A key
    holding null, or an empty tool_calls list, is read as absent: a dataset exported from Arrow
    or Parquet gives every message every key its column holds (Llama 3.1's template would take
    "tool_calls": null for a call)."""
    if isinstance(m, dict):
        m = {k: v for k, v in m.items() if v is not None and not (k == "tool_calls" and v == [])}
    if not (isinstance(m, dict) and m.get("role") in ROLES):
        hint = ""
        if isinstance(m, dict) and m.get("role") in ROLE_HINTS:
            hint = f" ({ROLE_HINTS[m['role']]})"
        sys.exit(f"{where} is not a message with a role ({', '.join(ROLES)}){hint}")
    role, allowed = m["role"], EXTRA_KEYS.get(m["role"], ())
    extra = sorted(set(m) - {"role", "content", *allowed})
    if extra:
        holds = ", ".join(("role", "content") + allowed)
        hints = "".join(f" ({k}: {KEY_HINTS[k]})" for k in extra if k in KEY_HINTS)
        sys.exit(f"{where} has keys {extra}; a message of role {role} holds {holds}{hints}")
    calls = m.get("tool_calls")
    if calls is not None and (not isinstance(calls, list)
                              or any(call_name(c) is None for c in calls)):
        sys.exit(f"{where}: 'tool_calls' is not a list of calls that each name a function "
                 '({"type": "function", "function": {"name", "arguments"}})')
    if not isinstance(m.get("reasoning_content", ""), str):
        sys.exit(f"{where}: 'reasoning_content' is not a string")
    content = m.get("content")
    if isinstance(content, list):
        content = text_parts(where, content)
    elif not isinstance(content, str) and not (calls and content is None):
        hint = " (only a turn with tool_calls may leave it out)" if role == "assistant" else ""
        sys.exit(f"{where} has no string content, nor a list of text parts{hint}")
    if role == "tool" and not (previous and (previous["role"] == "tool"
                                             or previous.get("tool_calls"))):
        sys.exit(f"{where} is a tool result that follows no assistant turn with tool_calls")
    return dict(m, content=content)  # none only in a turn of calls: call_contents

def conversation(path, number, record, key, tools):
    """(the record's list of messages, where each is in the record: 'field'[index], whether each
    is an assistant turn to learn). TRL's conversational format, or ShareGPT's (read_sharegpt),
    with its tool calls: roles
    system, user, assistant and tool, checked by checked_message, at least one assistant turn, and
    a user turn before the first assistant turn; OpenAI's weight, taken out of the messages. `key`
    may be a list of fields whose lists are joined (TRL's conversational prompt-completion:
    prompt, then completion)."""
    keys = key if isinstance(key, list) else [key]
    messages, names = [], []
    for k in keys:
        part = record.get(k) if isinstance(record, dict) else None
        if not isinstance(part, list) or not part:
            sys.exit(f"{path}:{number}: no list of messages in field '{k}'")
        names += [f"'{k}'[{i}]" for i in range(len(part))]
        messages += [read_sharegpt(f"{path}:{number}: {name}", m)
                     for m, name in zip(part, names[-len(part):])]
    key = " + ".join(f"'{k}'" for k in keys) if len(keys) > 1 else f"'{key}'"
    checked, learned = [], []
    for m, name in zip(messages, names):
        m = checked_message(f"{path}:{number}: {name}", m, checked[-1] if checked else None)
        learned.append(m["role"] == "assistant" and message_weight(f"{path}:{number}: {name}", m))
        checked.append({k: v for k, v in m.items() if k != "weight"})
    roles = [m["role"] for m in checked if m["role"] != "system"]
    if "assistant" not in roles:
        sys.exit(f"{path}:{number}: {key} has no assistant message to learn"
                 f"{preference_hint(record)}")
    if roles[0] == "assistant":  # a tool result cannot come first (checked_message)
        sys.exit(f"{path}:{number}: {key} opens with an assistant message; a conversation "
                 "starts with a user turn (after any system message)")
    # A template that does not read reasoning_content would drop the reasoning unseen: it must
    # render a probe given as the reasoning of the last turn.
    reasoning = [i for i, m in enumerate(checked) if m.get("reasoning_content")]
    if reasoning and TURN_PROBE not in render(path, number, [
            {"role": "user", "content": "?"},
            {"role": "assistant", "content": "", "reasoning_content": TURN_PROBE}], tools):
        sys.exit(f"{path}:{number}: {names[reasoning[0]]} has a reasoning_content, which the "
                 f"chat template{template_origin} does not render: the reasoning would be "
                 "dropped")
    return checked, names, learned

def json_field(path, number, record, key):
    """The record's field `key`, or the JSON a string there holds (as datasets kept in Parquet
    often store a column of lists or dicts); None when it has none (no field, null, "")."""
    value = record.get(key) if isinstance(record, dict) else None
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else None
        except ValueError as e:
            sys.exit(f"{path}:{number}: '{key}' is a string that is not JSON: {e}")
    return value

def tools_of(path, number, record):
    """The tools the record lists for the chat template (TRL's tools column): a list of JSON
    schemas, or a string holding one; None when the record has none (no field, null, empty)."""
    key = sft["tools"]
    value = json_field(path, number, record, key)
    if not value:
        return None
    if not isinstance(value, list) or any(call_name(t) is None for t in value):
        sys.exit(f"{path}:{number}: '{key}' is not a list of tool schemas that each name a "
                 'function ({"type": "function", "function": {"name", "parameters"}})')
    return value

# TRL's column of the keyword arguments SFTTrainer hands apply_chat_template with a row.
TEMPLATE_ARGUMENTS = "chat_template_kwargs"
# apply_chat_template's own arguments, which are not the template's: a row may not set them.
OWN_ARGUMENTS = frozenset((
    "conversation", "messages", "tools", "chat_template", "add_generation_prompt",
    "continue_final_message",
    "tokenize", "padding", "truncation", "max_length", "return_tensors", "return_dict",
    "return_assistant_tokens_mask", "tokenizer_kwargs"))

def template_arguments(path, number, record):
    """The keyword arguments the record gives its chat template, in TRL's chat_template_kwargs
    (Qwen3's enable_thinking, SmolLM3's xml_tools): an object, or a string holding one; a key
    holding null is read as absent (a Parquet struct column writes every key on every row); {}
    when the record has none."""
    value = json_field(path, number, record, TEMPLATE_ARGUMENTS)
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and k.isidentifier()
                                              for k in value):
        sys.exit(f"{path}:{number}: '{TEMPLATE_ARGUMENTS}' is not an object of keyword "
                 "arguments for the chat template")
    own = sorted(OWN_ARGUMENTS.intersection(value))
    if own:
        sys.exit(f"{path}:{number}: '{TEMPLATE_ARGUMENTS}' sets {own}, arguments of "
                 "apply_chat_template itself, not of the template" +
                 (" (the tools come from --tools-field)" if "tools" in own else ""))
    return {k: v for k, v in value.items() if v is not None}

def learned_turns(path, number, key, learned):
    """`learned`, when it holds a turn to learn; else the record is refused: every assistant
    message of `key` (a quoted field, or fields) has OpenAI's weight 0."""
    if not any(learned):
        sys.exit(f"{path}:{number}: every assistant message of {key} has weight 0: nothing to "
                 "learn")
    return learned

def row_tools(path, number, record):
    """The record's tools (tools_of), once it is checked that the tokenizer has a template for
    it (check_template_chosen); sets row_arguments to its template arguments."""
    global row_arguments
    row_arguments = template_arguments(path, number, record)
    tools = tools_of(path, number, record)
    check_template_chosen(path, number, tools)
    return tools

def message_example(path, number, record):
    key = sft["messages"]
    tools = sharegpt_tools(record.get(key) if isinstance(record, dict) else None,
                           row_tools(path, number, record))
    messages, names, learned = system_first(path, number, record,
                                            *conversation(path, number, record, key, tools))
    return chat_example(path, number, messages, names,
                        learned_turns(path, number, f"'{key}'", learned), tools)

def chat_pair_example(path, number, record):
    prompt, response = sft["prompt"], sft["response"]
    tools = row_tools(path, number, record)
    lists = [isinstance(record, dict) and isinstance(record.get(k), list)
             for k in (prompt_fields[0], response)]
    if lists[1] and not lists[0]:
        sys.exit(f"{path}:{number}: '{response}' is a list of messages, so "
                 f"'{prompt_fields[0]}' must be one too (TRL's conversational prompt-completion)")
    if lists[0] and len(prompt_fields) > 1:
        sys.exit(f"{path}:{number}: '{prompt_fields[0]}' is a list of messages, which is not "
                 f"joined with other fields (--prompt-field {prompt})")
    history = history_turns(path, number, record)
    if lists[0] and history[0]:
        sys.exit(f"{path}:{number}: '{prompt_fields[0]}' is a list of messages, which holds its "
                 f"own earlier turns: '{sft['history']}' (--history-field) goes with a prompt "
                 "string")
    if not lists[0]:
        return chat_example(path, number, *system_first(path, number, record, history[0] + [
            {"role": "user", "content": prompt_text(path, number, record)},
            {"role": "assistant", "content": string_field(path, number, record, response)}],
            history[1] + [f"'{prompt}'", f"'{response}'"], history[2] + [False, True]), tools)
    # TRL's conversational prompt-completion: the completion's turns count, as TRL's
    # completion-only loss counts them; the prompt's (an earlier reply too) do not.
    messages, names, learned = conversation(path, number, record, [prompt, response], tools)
    first = len(record[prompt])
    if "assistant" not in (m["role"] for m in messages[first:]):
        sys.exit(f"{path}:{number}: '{response}' has no assistant message to learn")
    learned = [False] * first + learned[first:]
    messages, names, learned = system_first(path, number, record, messages, names, learned)
    return chat_example(path, number, messages, names,
                        learned_turns(path, number, f"'{response}'", learned), tools)
)PY";

}  // namespace zt
