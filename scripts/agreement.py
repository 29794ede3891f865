#!/usr/bin/env python3
"""A grammar to learn and tasks that test it: subject-verb agreement over distractor words.

  python3 scripts/agreement.py --out DIR [--sentences 4000] [--pairs 200] [--seed 1]

writes DIR/corpus.txt (grammatical sentences of the form "the dogs often still run.", one a line,
to pretrain on), DIR/agreement.jsonl (minimal pairs: the sentence and the same one with the verb's
number wrong) and DIR/agreement-choice.jsonl (the same items as multiple choice: the sentence up to
its verb as the context, the two forms of the verb as the choices). The words between subject and
verb carry no number, so a model must carry the subject's number over them (docs/evaluation.md).
"""
import argparse
import json
import os
import random

NOUNS = ["dog", "cat", "bird", "cow", "hen", "pig"]
VERBS = ["run", "sleep", "eat", "walk", "jump", "swim"]
FILLERS = ["now", "then", "often", "still", "soon", "too"]


def sentence(rng, plural, fillers):
    """(subject and fillers, the verb that agrees, the verb that does not)"""
    words = ["the", rng.choice(NOUNS) + ("s" if plural else "")] + [rng.choice(FILLERS) for _ in range(fillers)]
    verb = rng.choice(VERBS)
    return " ".join(words), verb if plural else verb + "s", verb + "s" if plural else verb


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--sentences", type=int, default=4000)
    parser.add_argument("--pairs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "corpus.txt"), "w", encoding="utf-8") as f:
        for _ in range(args.sentences):
            context, good, _ = sentence(rng, rng.random() < 0.5, rng.randrange(3))
            f.write(f"{context} {good}.\n")
    pairs, choices = [], []
    for i in range(args.pairs):
        context, good, bad = sentence(rng, i % 2 == 1, 1 + (i // 2) % 2)
        pairs.append({"sentence_good": f"{context} {good}.", "sentence_bad": f"{context} {bad}."})
        label = rng.randrange(2)
        options = [f" {bad}.", f" {good}."] if label else [f" {good}.", f" {bad}."]
        choices.append({"context": context, "choices": options, "label": label})
    for name, rows in (("agreement.jsonl", pairs), ("agreement-choice.jsonl", choices)):
        with open(os.path.join(args.out, name), "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
    print(json.dumps({"sentences": args.sentences, "pairs": args.pairs, "out": args.out}))


if __name__ == "__main__":
    main()
