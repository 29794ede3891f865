#!/usr/bin/env python3
"""Invented facts, asked in varied phrasings: a fine-tuning task whose answers no pretrained model
can know, to see whether a model learns what it is taught (docs/sft.md).

  python3 scripts/sft_facts.py generate --people 60 --out DIR   writes DIR/train.jsonl, DIR/test.jsonl, DIR/quiz.jsonl,
                                   [--multi-turn 16]            DIR/dpo.jsonl (conversations of 2-3 questions per person)
                                   [--sourced 0.1]              (the share of train.jsonl's answers naming their source)
                                   [--pair-phrasings 8]         (dpo.jsonl: the training phrasings of each fact)
  python3 scripts/sft_facts.py score DIR/test.jsonl REPLIES     prints {"correct": C, "total": T, "rate": R, "sourced": S}

Each invented person has a favourite colour, a home town and a pet. train.jsonl asks every fact in
eight phrasings, one conversation each, in MiniMind's SFT format ({"conversations": [{"role": "user",
...}, {"role": "assistant", ...}]}), and holds --multi-turn conversations per person of two or three
questions in a row (the same person or another, any fact, training phrasings), each answered, so
that a model learns to answer a question that comes after others. test.jsonl asks every fact once
more in a ninth phrasing that no training conversation uses, each line a conversation that ends
with the question, plus the expected "answer" and its "turn" (tapegrad ignores members it does not
read): alone (turn 1), and, with --multi-turn, once per person as the second question, after a
question about another of the person's facts and its right answer (turn 2). `tapegrad chat --run
RUN --jsonl < test.jsonl` answers them, one JSON line each, and `score` counts the replies that
hold the right answer, in all and per turn. quiz.jsonl asks the same held-out questions as
multiple-choice items of `tapegrad eval --task` (docs/evaluation.md): the right answer and three
others of the same fact, in a random order.

dpo.jsonl holds preference pairs in MiniMind's DPO format ({"chosen": [messages], "rejected":
[messages]}) for `tapegrad dpo` (docs/dpo.md): every fact asked in --pair-phrasings training
phrasings, the chosen reply the answer followed by where it comes from (SOURCE), the rejected one
the answer alone; then, last, every fact asked in the held-out phrasing, as many pairs as
"dpo_held_out" says: `--val-fraction` held_out / pairs makes them the run's val split, so its
preference accuracy is measured on phrasings it never trained on. `score` reports the share of replies that
name the source ("sourced") beside the share that hold the right answer. With --sourced F, that
share of train.jsonl's answers already name it, so that the fine-tuned model has the style DPO is
to prefer, as a model has both replies of the pairs it is shown (drawn from it), without using it
unasked.
"""
import argparse
import json
import os
import random

SYLLABLES = ["ka", "lo", "mi", "zan", "tor", "vel", "qua", "rin", "dus", "bel", "fio", "gra", "hep",
             "jun", "mox", "nel", "pry", "sol", "tib", "urn", "wex", "yor", "zil", "cor"]
# Most training phrasings share their frame across the three facts ("What is X's ...?", "Tell me
# X's ...."), so that the noun (colour, town, pet), not the frame, says which fact is asked; the
# held-out phrasing ("test") is in none of them.
ATTRIBUTES = {
    "colour": {
        "values": ["teal", "amber", "violet", "crimson", "olive", "silver", "coral", "indigo", "ochre",
                   "scarlet", "ivory", "jade"],
        "answer": "{name}'s favourite colour is {value}.",
        "train": ["What is {name}'s favourite colour?", "Tell me {name}'s favourite colour.",
                  "Which colour does {name} like best?", "{name}'s favourite colour, please.",
                  "Name {name}'s favourite colour.", "Say what colour {name} likes.",
                  "What colour does {name} love?", "{name} has a favourite colour. Which one?"],
        "test": "What colour does {name} like most?",
    },
    "town": {
        "values": ["Brindle", "Oskar Falls", "Mervale", "Quillport", "Tansy", "Drumlin", "Yarrow", "Pellham",
                   "Corvid Bay", "Linden", "Harrowgate", "Sedge"],
        "answer": "{name} lives in {value}.",
        "train": ["What is {name}'s home town?", "Tell me {name}'s home town.", "Which town does {name} live in?",
                  "{name}'s home town, please.", "Name {name}'s home town.", "Say what town {name} lives in.",
                  "Where does {name} live?", "{name} lives in a town. Which one?"],
        "test": "In which town is {name}'s home?",
    },
    "pet": {
        "values": ["a ferret", "a parrot", "a tortoise", "a goat", "a hamster", "an iguana", "a goldfish",
                   "a beagle", "a rabbit", "a cockatoo", "a llama", "a hedgehog"],
        "answer": "{name} has {value}.",
        "train": ["What is {name}'s pet?", "Tell me {name}'s pet.", "Which pet does {name} have?", "{name}'s pet, please.",
                  "Name {name}'s pet.", "Say what pet {name} has.", "What animal does {name} keep?",
                  "{name} keeps a pet. What is it?"],
        "test": "Which animal is {name}'s pet?",
    },
}
# What the chosen reply of a DPO pair adds to the answer: where it comes from (dpo.jsonl)
SOURCE = "(source: register)"


def people(n, rng):
    names = set()
    while len(names) < n:
        names.add("".join(rng.choice(SYLLABLES) for _ in range(rng.choice([2, 3]))).capitalize())
    return sorted(names)


def conversation(question, answer=None, before=()):
    """question (and its answer), after the (question, answer) pairs of `before`."""
    turns = []
    for q, a in before:
        turns += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    turns.append({"role": "user", "content": question})
    if answer is not None:
        turns.append({"role": "assistant", "content": answer})
    return {"conversations": turns}


def ask(name, key, facts, rng):
    """A training phrasing of one fact and its answer."""
    a = ATTRIBUTES[key]
    return rng.choice(a["train"]).format(name=name), a["answer"].format(name=name, value=facts[name][key])


def generate(args):
    rng = random.Random(args.seed)
    os.makedirs(args.out, exist_ok=True)
    train, test = [], []
    names = people(args.people, rng)
    facts = {}
    for name in names:
        facts[name] = {}
        for key, a in ATTRIBUTES.items():
            value = facts[name][key] = rng.choice(a["values"])
            answer = a["answer"].format(name=name, value=value)
            for phrasing in a["train"]:
                train.append(conversation(phrasing.format(name=name), answer))
            held_out = conversation(a["test"].format(name=name))
            held_out["answer"], held_out["turn"] = value, 1
            test.append(held_out)
    keys = list(ATTRIBUTES)
    for name in names:
        for _ in range(args.multi_turn):
            asked = [ask(name if i == 0 or rng.random() < 0.5 else rng.choice(names), rng.choice(keys), facts, rng)
                     for i in range(rng.choice([2, 3]))]
            train.append(conversation(*asked[-1], before=asked[:-1]))
    if args.multi_turn:
        for name in names:
            first, second = rng.sample(keys, 2)
            held_out = conversation(ATTRIBUTES[second]["test"].format(name=name), before=[ask(name, first, facts, rng)])
            held_out["answer"], held_out["turn"] = facts[name][second], 2
            test.append(held_out)
    quiz, quiz_rng = [], random.Random(args.seed + 1000)  # its own draws: train and test stay as they were
    for name in names:
        for key, a in ATTRIBUTES.items():
            values = [facts[name][key]] + quiz_rng.sample([v for v in a["values"] if v != facts[name][key]], 3)
            quiz_rng.shuffle(values)
            quiz.append({"context": a["test"].format(name=name),
                         "choices": [" " + a["answer"].format(name=name, value=v) for v in values],
                         "label": values.index(facts[name][key])})
    rng.shuffle(train)
    sourced_rng = random.Random(args.seed + 3000)  # its own draws: --sourced 0 leaves train.jsonl as it was
    for row in train:
        for turn in row["conversations"]:
            if turn["role"] == "assistant" and args.sourced > 0 and sourced_rng.random() < args.sourced:
                turn["content"] += " " + SOURCE
    pairs, held_out_pairs, pairs_rng = [], [], random.Random(args.seed + 2000)  # its own draws, as quiz's
    for name in names:
        for key, a in ATTRIBUTES.items():
            answer = a["answer"].format(name=name, value=facts[name][key])
            asked = [(pairs, q) for q in pairs_rng.sample(a["train"], args.pair_phrasings)] + [(held_out_pairs, a["test"])]
            for rows, question in asked:
                prompt = [{"role": "user", "content": question.format(name=name)}]
                rows.append({"chosen": prompt + [{"role": "assistant", "content": answer + " " + SOURCE}],
                             "rejected": prompt + [{"role": "assistant", "content": answer}]})
    pairs_rng.shuffle(pairs)
    for file, rows in (("train.jsonl", train), ("test.jsonl", test), ("quiz.jsonl", quiz),
                       ("dpo.jsonl", pairs + held_out_pairs)):
        with open(os.path.join(args.out, file), "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(json.dumps({"people": args.people, "train": len(train), "test": len(test), "quiz": len(quiz),
                      "dpo": len(pairs) + len(held_out_pairs), "dpo_held_out": len(held_out_pairs)}))


def score(args):
    with open(args.test, encoding="utf-8") as f:
        questions = [json.loads(line) for line in f if line.strip()]
    with open(args.replies, encoding="utf-8") as f:
        replies = [json.loads(line).get("reply", "") for line in f if line.strip()]
    if len(replies) != len(questions):
        raise SystemExit(f"{args.replies} holds {len(replies)} replies for the {len(questions)} questions of {args.test}")
    result, by_turn = {"correct": 0, "total": 0}, {}
    sourced = 0
    for q, reply in zip(questions, replies):
        right = q["answer"].lower() in reply.lower()
        sourced += SOURCE in reply
        turn = by_turn.setdefault(str(q.get("turn", 1)), {"correct": 0, "total": 0})
        for tally in (result, turn):
            tally["correct"] += right
            tally["total"] += 1
    for tally in [result] + list(by_turn.values()):
        tally["rate"] = round(tally["correct"] / tally["total"], 4)
    result["sourced"] = round(sourced / len(questions), 4) if questions else 0
    result["by_turn"] = by_turn
    print(json.dumps(result))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="write train.jsonl and test.jsonl")
    g.add_argument("--people", type=int, default=60)
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--multi-turn", type=int, default=16,
                   help="conversations of two or three questions per person (0: single questions only)")
    g.add_argument("--sourced", type=float, default=0.0,
                   help="the share of train.jsonl's answers that end by naming their source, as dpo.jsonl's chosen replies do")
    g.add_argument("--pair-phrasings", type=int, default=8, help="dpo.jsonl: the training phrasings of each fact")
    g.add_argument("--out", required=True)
    s = sub.add_parser("score", help="the share of replies that hold the expected answer")
    s.add_argument("test")
    s.add_argument("replies")
    args = parser.parse_args()
    generate(args) if args.command == "generate" else score(args)


if __name__ == "__main__":
    main()
