#!/usr/bin/env python3
"""Checks that files hold strict JSON (RFC 8259): no NaN, Infinity or -Infinity, which Python's
json module accepts unless told otherwise. By the name's ending: .json one document, .jsonl one
document per non-empty line, .html the report's embedded <script type="application/json">,
.safetensors the header after its 8-byte length; a folder: every such file in it, at any depth.
Prints what is wrong and exits 1; exits 0 when every file is strict, and prints how many files and
documents it read. usage: strict_json.py FILE|FOLDER..."""
import json
import os
import struct
import sys

ENDINGS = (".json", ".jsonl", ".html", ".safetensors")


def reject(constant):
    raise ValueError(f"{constant} is not a JSON number")


def documents(path):
    data = open(path, "rb").read()
    if path.endswith(".safetensors"):
        (n,) = struct.unpack("<Q", data[:8])
        yield "header", data[8 : 8 + n].decode("utf-8")
    elif path.endswith(".html"):
        text = data.decode("utf-8")
        marker = '<script type="application/json" id="tapegrad-report-data">'
        begin = text.index(marker) + len(marker)
        yield "embedded data", text[begin : text.index("</script>", begin)]
    elif path.endswith(".jsonl"):
        for i, line in enumerate(data.decode("utf-8").splitlines(), 1):
            if line.strip():
                yield f"line {i}", line
    else:
        yield "document", data.decode("utf-8")


def files(args):
    for arg in args:
        if not os.path.isdir(arg):
            yield arg
            continue
        for root, _, names in sorted(os.walk(arg)):
            for name in sorted(names):
                if name.endswith(ENDINGS):
                    yield os.path.join(root, name)


bad = n_files = n_documents = 0
for path in files(sys.argv[1:]):
    n_files += 1
    count = 0
    for where, text in documents(path):
        count += 1
        n_documents += 1
        try:
            json.loads(text, parse_constant=reject)
        except ValueError as e:
            print(f"{path} {where}: {e}: {text[:200]}")
            bad += 1
    if count == 0:
        print(f"{path}: no JSON in it")
        bad += 1
print(f"{n_files} files, {n_documents} JSON documents, {bad} not strict JSON")
sys.exit(1 if bad else 0)
