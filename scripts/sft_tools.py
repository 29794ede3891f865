#!/usr/bin/env python3
"""Invented cities and three tools: a fine-tuning task of tool use in MiniMind-3's SFT format,
whose answers only the tools know (docs/sft.md, "A model that calls a tool").

  python3 scripts/sft_tools.py generate --out DIR [--seed 1]      writes DIR/tools.json, DIR/pretrain.txt,
                  [--lines 40000] [--conversations 3000]           DIR/train.jsonl, DIR/test.jsonl
                  [--held-out 60] [--thinking 0.25]
  python3 scripts/sft_tools.py respond DIR/test.jsonl REPLIES      the tools' responses: the next conversations
  python3 scripts/sft_tools.py score DIR/test.jsonl REPLIES ANSWERS   prints {"correct": C, "total": T, "rate": R, ...}

A city is two or three syllables (Belzora, Kodunma); get_weather, get_time and get_population
each take one, and answer with a value drawn for that tool and city ({"temp": 21},
{"hour": 7}, {"people": 413}). train.jsonl holds --conversations conversations, each on a
new city: the system turn with the tools, a question in one of two phrasings per tool, the
assistant's call, the tool's response and the answer that quotes it; --thinking of the calls come
with reasoning_content. pretrain.txt is text for the base model: --lines plain lines of the same
kind (question, call, response, answer) and the first 1000 conversations of train.jsonl written
as MiniMind-3's template renders them (so its tokenizer learns the template's words).

test.jsonl asks --held-out questions, each on a city no other line names, in MiniMind's format
(the system turn with the tools, then the question) with the expected call beside it ("expected";
tapegrad reads only "conversations"). `tapegrad chat --run RUN --jsonl < test.jsonl > REPLIES`
answers them; `respond` plays the tools: for each reply it writes the conversation on with the
assistant's own calls and each call's response ({"error": ...} for an unknown tool or a call
without a city), one line per question; `tapegrad chat --jsonl < NEXT > ANSWERS` answers those;
`score` counts a question right when the call was the expected one and the answer holds the
value the tool gave."""
import argparse
import json
import os
import random
import sys

SYLLABLES = ["ta", "lo", "ra", "ve", "min", "ko", "sa", "pel", "dun", "ri",
             "ma", "zo", "qui", "bel", "nor", "fa", "gi", "tus", "lan", "de"]
TOOLS = [{"name": name, "description": what, "parameters": {"city": "string"}}
         for name, what in (("get_weather", "temperature in degrees"),
                            ("get_time", "local time"),
                            ("get_population", "number of people"))]
ASKS = {"get_weather": ["What is the weather in {c}?", "How warm is it in {c}?"],
        "get_time": ["What time is it in {c}?", "Tell me the time in {c}."],
        "get_population": ["How many people live in {c}?", "What is the population of {c}?"]}
# get_time gives the hour alone: every value is then one number its answer copies, found by what
# precedes it. The minutes of "07:45" would have to be found by the two tokens before them (the
# hour and ":", and ":" is all over a JSON context), and a model of this size learnt that last
# and not always: in its failures the hour came out right and the minutes wrong.
ANSWERS = {"get_weather": "It is {v} degrees in {c}.", "get_time": "The hour in {c} is {v}.",
           "get_population": "{c} has {v} people."}
REASONS = {"get_weather": "A question of weather: get_weather.",
           "get_time": "A question of time: get_time.",
           "get_population": "A question of people: get_population."}
SYSTEM = "You are a helpful assistant."

# MiniMind-3's template (its chat_template in model/tokenizer_config.json), for the conversations
# this script writes: a system turn with tools, user turns, calls and tool responses.
TOOLS_HEAD = ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
              "You are provided with function signatures within <tools></tools> XML tags:\n<tools>")
TOOLS_TAIL = ("\n</tools>\n\nFor each function call, return a json object with function name and arguments "
              "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
              "\"arguments\": <args-json-object>}\n</tool_call>")


def dumps(value):
    return json.dumps(value, ensure_ascii=False)


def render(conversation):
    system, turns = conversation[0], conversation[1:]
    out = ["<|im_start|>system\n" + system["content"] + "\n\n" + TOOLS_HEAD]
    out += ["\n" + dumps(tool) for tool in json.loads(system["tools"])]
    out.append(TOOLS_TAIL + "<|im_end|>\n")
    for i, turn in enumerate(turns):
        if turn["role"] == "user":
            out.append("<|im_start|>user\n" + turn["content"] + "<|im_end|>\n")
        elif turn["role"] == "assistant":
            calls = json.loads(turn["tool_calls"]) if turn.get("tool_calls") else []
            content = turn.get("content") or ""
            text = "<think>\n" + turn.get("reasoning_content", "").strip("\n") + "\n</think>\n\n" + content
            blocks = ["<tool_call>\n" + dumps({"name": c["name"], "arguments": c["arguments"]}) + "\n</tool_call>"
                      for c in calls]
            if blocks:
                text += ("\n" if content else "") + "\n".join(blocks)
            out.append("<|im_start|>assistant\n" + text + "<|im_end|>\n")
        else:  # consecutive tool turns are one user turn
            if turns[i - 1]["role"] != "tool":
                out.append("<|im_start|>user")
            out.append("\n<tool_response>\n" + turn["content"] + "\n</tool_response>")
            if i + 1 == len(turns) or turns[i + 1]["role"] != "tool":
                out.append("<|im_end|>\n")
    return "".join(out)


def city(rng):
    return "".join(rng.sample(SYLLABLES, rng.choice([2, 3]))).capitalize()


def tool_response(name, arguments):
    """What the tool says: a value drawn for that tool and city, the same every time."""
    if name not in ASKS:
        return {"error": "no tool named %s" % name}
    where = arguments.get("city") if isinstance(arguments, dict) else None
    if not isinstance(where, str) or not where:
        return {"error": "%s needs a city" % name}
    rng = random.Random("%s:%s" % (name, where))
    if name == "get_weather":
        return {"temp": rng.randint(-9, 39)}
    if name == "get_time":
        return {"hour": rng.randint(0, 23)}
    return {"people": rng.randint(100, 999)}


def value_of(response):
    return str(next(iter(response.values())))


def system_turn():
    return {"role": "system", "content": SYSTEM, "tools": dumps(TOOLS)}


def conversation(rng, where, name, thinking):
    question = rng.choice(ASKS[name]).format(c=where)
    call = [{"name": name, "arguments": {"city": where}}]
    response = tool_response(name, call[0]["arguments"])
    asked = {"role": "assistant", "content": None, "tool_calls": dumps(call)}
    if thinking:
        asked["reasoning_content"] = REASONS[name]
    return [system_turn(), {"role": "user", "content": question}, asked,
            {"role": "tool", "content": dumps(response)},
            {"role": "assistant", "content": ANSWERS[name].format(v=value_of(response), c=where)}]


def generate(args):
    os.makedirs(args.out, exist_ok=True)
    rng = random.Random(args.seed)
    held_out = []
    while len(held_out) < args.held_out:
        where = city(rng)
        if where not in held_out:
            held_out.append(where)
    names = list(ASKS)

    def trained_city():
        while True:
            where = city(rng)
            if where not in held_out:
                return where

    lines = []
    for _ in range(args.lines):
        name, where = rng.choice(names), trained_city()
        response = tool_response(name, {"city": where})
        lines.append("%s\n%s\n%s\n%s\n" % (rng.choice(ASKS[name]).format(c=where),
                                           dumps([{"name": name, "arguments": {"city": where}}]), dumps(response),
                                           ANSWERS[name].format(v=value_of(response), c=where)))
    train = [conversation(rng, trained_city(), rng.choice(names), rng.random() < args.thinking)
             for _ in range(args.conversations)]
    with open(os.path.join(args.out, "tools.json"), "w") as f:
        f.write(dumps(TOOLS) + "\n")
    with open(os.path.join(args.out, "pretrain.txt"), "w") as f:
        f.write("".join(lines) + "".join(render(c) for c in train[:1000]))
    with open(os.path.join(args.out, "train.jsonl"), "w") as f:
        f.write("".join(dumps({"conversations": c}) + "\n" for c in train))
    with open(os.path.join(args.out, "test.jsonl"), "w") as f:
        for i, where in enumerate(held_out):
            name = names[i % len(names)]
            asked = [system_turn(), {"role": "user", "content": rng.choice(ASKS[name]).format(c=where)}]
            f.write(dumps({"conversations": asked, "expected": {"name": name, "arguments": {"city": where}}}) + "\n")
    print(dumps({"train": len(train), "held_out": len(held_out), "lines": len(lines)}))


def read_lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def respond(args):
    tests, replies = read_lines(args.test), read_lines(args.replies)
    if len(tests) != len(replies):
        sys.exit("sft_tools: %d questions but %d replies" % (len(tests), len(replies)))
    for test, reply in zip(tests, replies):
        calls = [c for c in reply.get("tool_calls", []) if isinstance(c, dict)]
        turns = list(test["conversations"])
        said = {"role": "assistant", "content": reply.get("reply") or None}
        if reply.get("reasoning_content"):
            said["reasoning_content"] = reply["reasoning_content"]
        if calls:
            said["tool_calls"] = calls
        turns.append(said)
        responses = [tool_response(c.get("name"), c.get("arguments")) for c in calls] or [{"error": "no tool was called"}]
        turns += [{"role": "tool", "content": dumps(response)} for response in responses]
        print(dumps({"conversations": turns}))


def score(args):
    tests, replies, answers = read_lines(args.test), read_lines(args.replies), read_lines(args.answers)
    if not len(tests) == len(replies) == len(answers):
        sys.exit("sft_tools: %d questions, %d replies, %d answers" % (len(tests), len(replies), len(answers)))
    calls = correct = 0
    for test, reply, answer in zip(tests, replies, answers):
        want = test["expected"]
        got = [{"name": c.get("name"), "arguments": c.get("arguments")} for c in reply.get("tool_calls", [])
               if isinstance(c, dict)]
        called = got == [want]
        value = value_of(tool_response(want["name"], want["arguments"]))
        said = (" " + answer.get("reply", "") + " ").replace(".", " ")
        calls += called
        correct += called and (" " + value + " ") in said
    total = len(tests)
    print(dumps({"correct": correct, "total": total, "rate": correct / total if total else 0.0,
                 "calls": calls / total if total else 0.0}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate")
    g.add_argument("--out", required=True)
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--lines", type=int, default=40000)
    g.add_argument("--conversations", type=int, default=3000)
    g.add_argument("--held-out", type=int, default=60)
    g.add_argument("--thinking", type=float, default=0.25)
    r = sub.add_parser("respond")
    r.add_argument("test")
    r.add_argument("replies")
    s = sub.add_parser("score")
    s.add_argument("test")
    s.add_argument("replies")
    s.add_argument("answers")
    args = parser.parse_args()
    {"generate": generate, "respond": respond, "score": score}[args.command](args)


if __name__ == "__main__":
    main()
