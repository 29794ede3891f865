"""Checks that files hold JSON as RFC 8259 writes it, as the strictest reader would take it: UTF-8
throughout, no NaN, Infinity or -Infinity (which Python's json module accepts unless told
otherwise), no key twice in an object, no escape naming half a surrogate pair. By the name's
ending: .json one document, .jsonl one document per non-empty line, .html the report's embedded
<script type="application/json">, .safetensors the header after its 8-byte length; a folder: every
such file in it, at any depth. Prints what is wrong and exits 1; exits 0 when every file is strict,
and prints how many files and documents it read. usage: strict_json.py FILE|FOLDER..."""
import json
import os
import struct
import sys

ENDINGS = (".json", ".jsonl", ".html", ".safetensors")


def reject(constant):
    raise ValueError(f"{constant} is not a JSON number")


def unique_keys(pairs):
    seen = set()
    for key, _ in pairs:
        if key in seen:
            raise ValueError(f"the key {key!r} appears twice in one object")
        seen.add(key)
    return dict(pairs)


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
    try:
        for where, text in documents(path):
            count += 1
            n_documents += 1
            try:
                utf8_strings(json.loads(text, object_pairs_hook=unique_keys, parse_constant=reject))
            except ValueError as e:  # UnicodeError is a ValueError too
                print(f"{path} {where}: {e}: {text[:200]}")
                bad += 1
    except (OSError, ValueError, struct.error) as e:
        print(f"{path}: {e}")
        bad += 1
        continue
    if count == 0:
        print(f"{path}: no JSON in it")
        bad += 1
print(f"{n_files} files, {n_documents} JSON documents, {bad} not strict JSON")
sys.exit(1 if bad else 0)
