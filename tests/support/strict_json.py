#!/usr/bin/env python3
"""Checks that every file named is JSON as RFC 8259 writes it, as the strictest reader would take
it: UTF-8 throughout, no control character unescaped, no NaN or Infinity, no key twice in an
object, no escape naming half a surrogate pair. Prints the first fault and exits 1; exits 0 when
every file passes. usage: strict_json.py FILE...  (tests/test_tokenizer_json.c runs it)"""
import json
import sys


def unique_keys(pairs):
    seen = set()
    for key, _ in pairs:
        if key in seen:
            raise ValueError("the key %r appears twice in one object" % key)
        seen.add(key)
    return dict(pairs)


def no_constant(name):
    raise ValueError("%s is not JSON" % name)


def utf8_strings(value):
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            v.encode("utf-8")  # a lone surrogate from a \ud800 escape fails here
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)


for path in sys.argv[1:]:
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8")
        utf8_strings(json.loads(text, object_pairs_hook=unique_keys, parse_constant=no_constant))
    except Exception as e:  # noqa: BLE001 - any fault is the answer
        print("%s: %s" % (path, e))
        sys.exit(1)
