"""Part 4 of test_hf_sft.py: bad SFT input, refused naming the file, the line and the field.

Each function takes the test's SftOracle once its earlier parts ran (the tokenizers, the records'
files, the conversations, the trained model)."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import run_tool  # noqa: E402
from test_hf_tokenizer import refused  # noqa: E402


def check_sft_refusals(o):
    refuse_bad_fields(o)
    refuse_bad_messages(o)
    refuse_bad_models(o)
    print("ok   bad inputs refused, naming the file, the line and the field")


def refuse_bad_fields(o):
    """A missing response, the field options, --chat-template's needs."""
    zt, work, python, records, conversations = o.zt, o.work, o.python, o.records, o.conversations
    with open(work("bad.jsonl"), "w") as f:
        f.write(json.dumps(records[0]) + "\n" + json.dumps({"question": "no answer"}) + "\n")
    refused([zt, "prepare-data", "--tokenizer", work("tok"), "--sft-jsonl", work("bad.jsonl"),
             "--prompt-field", "question", "--response-field", "answer",
             "--out", work("bad.h5")] + python,
            [work("bad.jsonl") + ":2", "'answer'"], work("bad.h5"))
    refused([zt, "prepare-data", "--tokenizer", "HuggingFaceTB/SmolLM2-135M-Instruct",
             "--sft-jsonl", work("sft.jsonl"), "--out", work("bad.h5")] + python,
            ["tokenizer 'HuggingFaceTB/SmolLM2-135M-Instruct' does not exist",
             "hf download HuggingFaceTB/SmolLM2-135M-Instruct"], work("bad.h5"))
    refused([zt, "prepare-data", "--tokenizer", work("tok"), "--jsonl", work("sft.jsonl"),
             "--response-field", "answer", "--out", work("bad.h5")] + python,
            ["--response-field", "--sft-jsonl"], work("bad.h5"))
    refused([zt, "prepare-data", "--tokenizer", work("tok"), "--sft-jsonl", work("sft.jsonl"),
             "--text-field", "question", "--out", work("bad.h5")] + python,
            ["--text-field applies to --jsonl", "--prompt-field"], work("bad.h5"))
    for fields, named in [(["answer", "answer"], ["--prompt-field", "--response-field"]),
                          (["question,answer", "answer"], ["--prompt-field",
                                                           "--response-field"]),
                          (["question,,id", "answer"], ["'question,,id'", "empty field"]),
                          (["question,id,question", "answer"], ["'question' twice"]),
                          (["id,question", "answer"], [work("sft.jsonl") + ":1",
                                                       "no string field 'id'"])]:
        refused([zt, "prepare-data", "--tokenizer", work("tok"), "--sft-jsonl",
                 work("sft.jsonl"), "--prompt-field", fields[0], "--response-field",
                 fields[1], "--out", work("bad.h5")] + python, named, work("bad.h5"))
    refused([zt, "prepare-data", "--tokenizer", work("tok"), "--sft-jsonl", work("sft.jsonl"),
             "--prompt-field", "question", "--response-field", "answer", "--chat-template",
             "--out", work("bad.h5")] + python,
            [work("tok", "tokenizer_config.json"), "chat_template"], work("bad.h5"))
    refused([zt, "prepare-data", "--tokenizer", work("chat_tok"), "--sft-jsonl",
             work("chats.jsonl"), "--messages-field", "messages", "--out", work("bad.h5")]
            + python, ["--messages-field", "--chat-template"], work("bad.h5"))
    with open(work("bad_chats.jsonl"), "w") as f:
        f.write(json.dumps({"messages": conversations[0]}) + "\n")
        f.write(json.dumps({"messages": conversations[0][:2]}) + "\n")
        f.write(json.dumps({"messages": [{"role": "tool", "content": "x"}]}) + "\n")
    refused([zt, "prepare-data", "--tokenizer", work("chat_tok"), "--sft-jsonl",
             work("bad_chats.jsonl"), "--messages-field", "messages", "--chat-template",
             "--out", work("bad.h5")] + python,
            [work("bad_chats.jsonl") + ":2", "'messages'", "no assistant"], work("bad.h5"))


def refuse_bad_messages(o):
    """TRL's names, bad messages, roles, keys and tool calls."""
    zt, work, python, conversations = o.zt, o.work, o.python, o.conversations
    # TRL's names, told where the error is: the completion field, a conversational prompt
    # without --chat-template.
    with open(work("trl_names.jsonl"), "w") as f:
        f.write(json.dumps({"prompt": "q", "completion": "a"}) + "\n")
    refused([zt, "prepare-data", "--tokenizer", work("tok"), "--sft-jsonl",
             work("trl_names.jsonl"), "--out", work("bad.h5")] + python,
            [work("trl_names.jsonl") + ":1", "'response'", "--response-field completion"],
            work("bad.h5"))
    refused([zt, "prepare-data", "--tokenizer", work("chat_tok"), "--sft-jsonl",
             work("prompt_completion.jsonl"), "--prompt-field", "prompt", "--response-field",
             "completion", "--out", work("bad.h5")] + python,
            [work("prompt_completion.jsonl") + ":1", "'prompt'", "--chat-template"],
            work("bad.h5"))
    with open(work("half_conversational.jsonl"), "w") as f:
        f.write(json.dumps({"prompt": "q", "completion": conversations[0][4:]}) + "\n")
    refused([zt, "prepare-data", "--tokenizer", work("chat_tok"), "--sft-jsonl",
             work("half_conversational.jsonl"), "--prompt-field", "prompt",
             "--response-field", "completion", "--chat-template", "--out", work("bad.h5")]
            + python, [work("half_conversational.jsonl") + ":1",
                       "'completion' is a list of messages, so 'prompt' must be one too"],
            work("bad.h5"))
    # A bad message of a prompt-completion line is named by its own field and index.
    with open(work("bad_completion.jsonl"), "w") as f:
        f.write(json.dumps({"prompt": conversations[0][:2],
                            "completion": [conversations[0][2],
                                           {"role": "function", "content": "x"}]}) + "\n")
    refused([zt, "prepare-data", "--tokenizer", work("chat_tok"), "--sft-jsonl",
             work("bad_completion.jsonl"), "--prompt-field", "prompt", "--response-field",
             "completion", "--chat-template", "--out", work("bad.h5")] + python,
            [work("bad_completion.jsonl") + ":1: 'completion'[1] is not a message"],
            work("bad.h5"))
    # An unknown role (OpenAI's retired "function"); a reasoning_content this template does
    # not render (it would be dropped unseen), a key no role holds (Harmony's "thinking");
    # tool calls that do not hold together: a result answering no call, a call naming no
    # function, tools not JSON.
    user = {"role": "user", "content": "q"}
    for name, record, named in [
            ("bad_keys", {"messages": [user, {"role": "assistant", "content": "a",
                                              "reasoning_content": "r"}]},
             ["'messages'[1]", "reasoning_content", "does not render"]),
            ("unknown_key", {"messages": [user, {"role": "assistant", "content": "a",
                                                 "thinking": "r"}]},
             ["'messages'[1]", "'thinking'"]),
            ("bad_roles", {"messages": [{"role": "function", "content": "x"}]},
             ["'messages'[0]", "role", "write it as a tool message"]),
            ("unasked_result", {"messages": [user, {"role": "tool", "content": "r"},
                                             {"role": "assistant", "content": "a"}]},
             ["'messages'[1]", "tool result", "tool_calls"]),
            ("nameless_call", {"messages": [user, {"role": "assistant", "tool_calls": [
                {"type": "function", "function": {"arguments": {}}}]}]},
             ["'messages'[1]", "'tool_calls'", "name"]),
            ("bad_tools", {"messages": [user, {"role": "assistant", "content": "a"}],
                           "tools": "[{"}, ["'tools'", "not JSON"])]:
        with open(work(name + ".jsonl"), "w") as f:
            f.write(json.dumps(record) + "\n")
        refused([zt, "prepare-data", "--tokenizer", work("chat_tok"), "--sft-jsonl",
                 work(name + ".jsonl"), "--messages-field", "messages", "--chat-template",
                 "--out", work("bad.h5")] + python,
                [work(name + ".jsonl") + ":1"] + named, work("bad.h5"))
    refused([zt, "prepare-data", "--tokenizer", work("tok"), "--sft-jsonl", work("sft.jsonl"),
             "--tools-field", "functions", "--out", work("bad.h5")] + python,
            ["--tools-field", "--chat-template"], work("bad.h5"))
    refused([zt, "prepare-data", "--tokenizer", work("chat_tok"), "--sft-jsonl",
             work("chats.jsonl"), "--messages-field", "messages", "--chat-template",
             "--tools-field", "messages", "--out", work("bad.h5")] + python,
            ["--tools-field", "holds the examples"], work("bad.h5"))


def refuse_bad_models(o):
    """Byte-level data for a model with a tokenizer; generate's own refusals."""
    zt, work, python, text_file = o.zt, o.work, o.python, o.text_file
    # Byte-level data (prepare-data --text without --tokenizer) for a model that carries
    # its own tokenizer.json: its bytes would be read as that tokenizer's ids.
    run_tool([zt, "prepare-data", "--text", text_file, "--out", work("bytes.h5")])
    for command in (["train", "--out", work("byte_run"), "--steps", "1"], ["eval"]):
        refused([zt, *command, "--model", work("run", "final"), "--data", work("bytes.h5"),
                 "--seq-len", str(o.seq_len), "--micro-batch", "1"],
                [work("bytes.h5"), "holds bytes", "tokenizer.json",
                 "--tokenizer " + work("run", "final")], work("byte_run"))
    refused([zt, "generate", "--model", work("model"), "--prompt", "x"] + python,
            [work("model"), "tokenizer.json", "--tokenizer"], work("no_output"))
    refused([zt, "generate", "--model", work("run", "final"), "--prompt", "x", "--do-sample",
             "--temperature", "0"] + python, ["--temperature"], work("no_output"))
    refused([zt, "generate", "--model", work("run", "final"), "--prompt", "x " * 200]
            + python, ["the model's max_position_embeddings 128"], work("no_output"))
