#!/usr/bin/env python3
"""Walk the manual as a newcomer does: run every command block of a page, in a scratch clone.

    python3 tests/docs_walk.py --source SRC --build BUILD PAGE...

The pages are walked in the order given, in one scratch copy of the source tree (the files git
tracks, and the untracked ones it does not ignore, committed in a fresh repository), with `build`
a link to BUILD and BUILD first on the PATH, so that `./build/tapegrad` and `tapegrad` are both
the program just built. What is walked:

- a ```sh block: each command (a line, with its `\\` continuations) runs with bash from the top
  of the clone, in the page's order, and must exit 0;
- a transcript: a block whose first line starts with `$ `: the command runs, and what it prints
  (stdout and stderr) must match the lines under it: `[...]` alone skips any lines, `[...]` in a
  line matches any text, and an `N` alone (after a space or `[`, before a space, `,`, `:`, `;`, `)` or `]`) matches a number.

After each page, no file may have been written or changed in the clone outside `checkpoints/`
(the folder made for what the examples write).

The walk runs what the page says, except where page_rules below states otherwise, each with its reason:
a smaller step count (the suite's minutes are few), a stand-in for a file the page says to
download, or a command left out because it cannot run here (another machine, a CPU feature). A
rule that matches nothing fails the walk, so the rules follow the pages. A page of the walk
that has no command block fails too.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

SKIP_CODE = 77
STEPS = "the suite's minutes are few: fewer steps than the page's, the commands as written otherwise"


class Rule:
    """sub: rewrite a command; skip: leave it out; fails: it must exit non-zero; before: a shell
    line run before the page's first command."""

    def __init__(self, kind, pattern, why, repl=None, when=True, smaller=False):
        self.kind, self.pattern, self.why, self.repl, self.when, self.used = kind, pattern, why, repl, when, 0
        self.smaller = smaller or why.startswith(STEPS)  # a cut for time, which --as-written leaves out


def sub(pattern, repl, why, when=True, smaller=False):
    return Rule("sub", pattern, why, repl, when, smaller)


def skip(pattern, why, when=True, smaller=False):
    return Rule("skip", pattern, why, when=when, smaller=smaller)


def fails(pattern, why):
    return Rule("fails", pattern, why)


def before(line, why):
    return Rule("before", line, why)


def page_rules(runs):
    """The walk's rules, page by page; `runs`: the kernel paths this CPU runs (tapegrad --version)."""
    return {
        "docs/training.md": [
            sub(r"^tapegrad train( +#|$)", r"tapegrad train --steps 30\1", STEPS),
            sub(r"--steps 2000 --out checkpoints/notes ", "--steps 100 --ckpt-every 10 --out checkpoints/notes ", STEPS),
            sub(r"(--out checkpoints/notes2)", r"\1 --steps 30", STEPS),
            sub(r"^(tapegrad train --preset minimind-26m)", r"\1 --steps 1 --batch 2 --eval-batches 1",
                STEPS + "; a step of 2 rows, 1 val batch"),
            sub(r"^(tapegrad sft --init-from checkpoints/notes .*--out checkpoints/chat)", r"\1 --steps 30", STEPS),
            sub(r"--steps 1000 --out checkpoints/letters", "--steps 30 --out checkpoints/letters", STEPS),
            sub(r"ckpt-00001600", "ckpt-00000080", "the shorter run of notes keeps checkpoints 80, 90 and 100",
                smaller=True),
            sub(r"(--out checkpoints/letters-(1600|lora))", r"\1 --steps 30", STEPS),
            sub(r"--resume checkpoints/letters +--steps 2000", "--resume checkpoints/letters --steps 40", STEPS),
            before("tapegrad train --preset tiny --steps 1 --tokenizer bpe --vocab 400 --special-tokens chatml "
                   "--data /usr/share/games/fortunes/computers --out checkpoints/walk-tokenizer && "
                   "tapegrad ckpt export checkpoints/walk-tokenizer --hf checkpoints/walk-tokenizer-hf && "
                   "mkdir -p checkpoints/minimind && cp checkpoints/walk-tokenizer-hf/tokenizer.json checkpoints/minimind/",
                   "no download here: a byte-level BPE's tokenizer.json, as tapegrad exports it, stands in for MiniMind's"),
        ],
        "docs/inspecting.md": [
            sub(r"^(\./build/tapegrad compare-ffn)", r"\1 --preset tiny --steps 30 --lrs 1e-2 --seeds 1", STEPS),
        ],
        "docs/data-parallel.md": [
            sub(r"^mpirun ", "mpirun --allow-run-as-root ", "the page's note: as root, Open MPI wants --allow-run-as-root",
                when=os.geteuid() == 0),
            sub(r"--threads 1 --out checkpoints/dp$", "--threads 1 --steps 40 --stop-after 20 --out checkpoints/dp",
                STEPS + "; stopped half-way, so that the resume has steps to train"),
            skip(r"--map-by socket", "a server of two sockets: this machine may have one"),
            skip(r"--hostfile", "the machines node1 and node2 and the folder /shared"),
        ],
        "docs/performance.md": [
            skip(r"^bash bench/compare\.sh", "cut to the walk's counts it is the next line, the quick look",
                 smaller=True),
            sub(r"^ROUNDS=3 ", "ROUNDS=1 PRESETS=tiny STEPS=2 ", STEPS),
            skip(r"PATHS=avx512bf16", "this CPU has no avx512bf16 path", when="avx512bf16" not in runs),
            skip(r'PATHS="avx512 avx2"', "this CPU has no avx512 path", when="avx512" not in runs),
            sub(r"^FFNS=", "ROUNDS=1 PRESETS=tiny STEPS=2 FFNS=", STEPS),
            sub(r"^(\./build/tapegrad bench --preset minimind-26m)", r"\1 --steps 1 --warmup 1", STEPS),
            sub(r"^bash bench/scaling\.sh", 'ROUNDS=1 SEQS="64 128" PRESETS="tiny small" bash bench/scaling.sh', STEPS),
            skip(r"^\./build/gemm_bench", "a minute of one-thread GEMM timings; tests/test_gemm.c checks the same kernels",
                 smaller=True),
        ],
        "docs/api.md": [
            fails(r"custom_op --break-backward", "the page shows the gradient check failing on a planted error"),
        ],
        "docs/data.md": [
            before("python3 -c \"import json; [print(json.dumps({'text': t.strip()})) "
                   "for f in ('computers', 'literature', 'science') "
                   "for t in open('/usr/share/games/fortunes/' + f, encoding='utf-8').read().split('\\n%\\n') "
                   "if t.strip()]\" "
                   "> checkpoints/pretrain_hq.jsonl",
                   "no download here: fortunes as JSONL of {\"text\"} lines stand in for MiniMind's file"),
            sub(r"--steps 3000$", "--steps 1 --batch 2 --eval-batches 1", STEPS + "; a step of 2 rows, 1 val batch"),
            sub(r"(--lr 1e-3 --out checkpoints/lr1e-3)", r"\1 --steps 1 --batch 2 --eval-batches 1",
                STEPS + "; a step of 2 rows, 1 val batch"),
            skip(r"--tokenizer hf:minimind/model/tokenizer\.json",
                 "MiniMind's tokenizer is a download and minimind-3 hours of training; tests/test_clients.c trains a "
                 "MiniMind-3-shaped model with a tokenizer laid out as MiniMind's, its tokenizer_config.json beside it"),
        ],
        "docs/sft.md": [
            skip(r"^cmake ", "the clone's build/ is the build under test"),
            sub(r"--steps 1500 --out checkpoints/base$", "--steps 60 --out checkpoints/base", STEPS),
            sub(r"--people 200 ", "--people 10 ", "fewer invented people: fewer conversations to train on and to answer",
                smaller=True),
            sub(r"--steps 1500 --out checkpoints/chat$", "--steps 60 --out checkpoints/chat", STEPS),
            sub(r"--steps 1500 +--lora-rank 16 --out checkpoints/chat-lora$", "--steps 60 --lora-rank 16 --out checkpoints/chat-lora",
                STEPS),
            sub(r"(--lora-tokens none --out checkpoints/chat-lora-qkvo)$", r"\1 --steps 30", STEPS),
            sub(r"generate --out checkpoints/tools$", "generate --out checkpoints/tools --lines 2000 --conversations 100 "
                "--held-out 6", "a smaller tool-use task: fewer lines to pretrain on, conversations and questions",
                smaller=True),
            sub(r"--steps 900 (--batch 16 --lr 1e-2)", r"--steps 20 \1", STEPS),
            sub(r"--steps 150 (--batch 16 --lr 1e-3)", r"--steps 10 \1", STEPS),
        ],
        "docs/dpo.md": [
            sub(r"--people 200 ", "--people 10 ", "fewer invented people: fewer conversations and pairs to train on",
                smaller=True),
            sub(r"--steps 1500 --out checkpoints/chat-sourced$", "--steps 60 --out checkpoints/chat-sourced", STEPS),
            sub(r"--steps 30 --out checkpoints/dpo$", "--steps 10 --out checkpoints/dpo", STEPS),
        ],
        "docs/chat.md": [
            skip(r"checkpoints/sft-facts/chat",
                 "the model of bench/sft_facts.sh, minutes of training; tests/test_chat_terminal.c drives the same "
                 "commands and tests/test_sft.c the replies of a smaller one"),
        ],
        "docs/export.md": [
            sub(r"--steps 600 --eval-every 200", "--steps 30 --eval-every 10", STEPS),
        ],
        "docs/evaluation.md": [
            sub(r"--steps 300( +--eval-task checkpoints/facts/quiz\.jsonl --out checkpoints/chat-quiz)", r"--steps 30\1",
                STEPS),
        ],
    }


def fail(message):
    print(f"docs walk: {message}", file=sys.stderr)
    sys.exit(1)


def continues(line):
    """Whether a command goes on on the next line: a `\\`, or a pipe or && at its end."""
    return re.search(r"(\\|\||&&)\s*$", line) is not None


def take_command(body, j, first):
    """The command that starts at body[j] (its text there: `first`) with its continuation lines
    joined, and the index of the line after it."""
    command = first
    while continues(command) and j + 1 < len(body):
        j += 1
        command = command.rstrip()
        command = (command[:-1] if command.endswith("\\") else command) + " " + body[j].strip()
    return command, j + 1


def commands_of(page_path):
    """[(line number, kind, command, expected lines)] of a page: kind 'sh' or 'transcript'."""
    lines = open(page_path, encoding="utf-8").read().split("\n")
    out, i = [], 0
    while i < len(lines):
        fence = re.match(r"^```(\S*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        info, start = fence.group(1), i + 1
        end = start
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        body = lines[start:end]
        i = end + 1
        j = 0
        if info == "sh":
            while j < len(body):
                at, (command, j) = start + j + 1, take_command(body, j, body[j])
                if command.strip() and not command.lstrip().startswith("#"):
                    out.append((at, "sh", command, None))
        elif body and body[0].startswith("$ "):
            while j < len(body):
                at, (command, j) = start + j + 1, take_command(body, j, body[j][2:])
                expected = []
                while j < len(body) and not body[j].startswith("$ "):
                    expected.append(body[j])
                    j += 1
                out.append((at, "transcript", command, expected))
    return out


def line_pattern(line):
    """A page's output line as a regex: `[...]` any text, a lone N a number, the rest literal."""
    parts = re.split(r"(\[\.\.\.\]|(?:(?<=^)|(?<=[ \[]))N(?=$|[ ,:;)\]]))", line)
    regex = ""
    for part in parts:
        if part == "[...]":
            regex += ".*"
        elif part == "N":
            regex += r"[0-9]+(\.[0-9]+)?"
        else:
            regex += re.escape(part)
    return re.compile("^" + regex + "$")


def transcript_matches(expected, printed):
    """None when printed holds expected's lines in order by the rules above, else why not."""
    got = [line for line in printed.split("\n") if line != ""]
    at, skipping = 0, False
    for want in (line for line in expected if line != ""):
        if want == "[...]":
            skipping = True
            continue
        pattern = line_pattern(want)
        while at < len(got) and not pattern.match(got[at]):
            if not skipping:
                return f'the page says "{want}", the program printed "{got[at]}"'
            at += 1
        if at == len(got):
            return f'the page says "{want}", which the program does not print (after the lines before it)'
        at += 1
        skipping = False
    return None


def self_check():
    """The walk's own rules, each shown to catch what it should, before any page is trusted to them."""
    printed = "a 1\nb 2.5 s\nc x y\nd [3, 4]\n"
    passes = [["a 1", "b N s", "[...]", "d [N, N]"], ["[...]", "c [...] y"]]
    fails = [["a 2"], ["a 1", "c x y"], ["a 1", "[...]", "e"], ["b N s"], ["d [N N]"]]
    wrong = [e for e in passes if transcript_matches(e, printed)] + [e for e in fails if not transcript_matches(e, printed)]
    body = ["one \\", "  two |", "three", "four"]
    if take_command(body, 0, body[0]) != ("one  two | three", 3) or wrong:
        fail(f"its own matching or joining is wrong (on {wrong or body}): fix tests/docs_walk.py")


def apply_rules(rules, command):
    """The command as the walk runs it, and whether to run it and whether it must fail."""
    run, must_fail = True, False
    for rule in rules:
        if rule.kind == "before" or not rule.when or not re.search(rule.pattern, command):
            continue
        rule.used += 1
        if rule.kind == "sub":
            command = re.sub(rule.pattern, rule.repl, command)
        elif rule.kind == "skip":
            run = False
        elif rule.kind == "fails":
            must_fail = True
    return command, run, must_fail


def make_clone(source, scratch):
    listed = subprocess.run(["git", "-C", source, "ls-files", "-co", "--exclude-standard", "-z"],
                            capture_output=True)
    if listed.returncode != 0:
        print("docs walk: the source folder is not a git work tree; skipped", file=sys.stderr)
        sys.exit(SKIP_CODE)
    for rel in listed.stdout.decode().split("\0"):
        if not rel or not os.path.lexists(os.path.join(source, rel)):
            continue
        os.makedirs(os.path.join(scratch, os.path.dirname(rel)), exist_ok=True)
        shutil.copy2(os.path.join(source, rel), os.path.join(scratch, rel), follow_symlinks=False)
    quiet = {"cwd": scratch, "check": True, "capture_output": True}
    subprocess.run(["git", "init", "-q"], **quiet)
    subprocess.run(["git", "add", "-A"], **quiet)
    subprocess.run(["git", "-c", "user.name=walk", "-c", "user.email=walk@localhost", "commit", "-qm", "clone"],
                   **quiet)


def written_outside_checkpoints(clone):
    status = subprocess.run(["git", "status", "--porcelain", "--ignored", "--untracked-files=all"], cwd=clone,
                            capture_output=True, text=True, check=True).stdout
    bad = []
    for line in status.splitlines():
        path = line[3:]
        if path.startswith("checkpoints/") or path in ("build", "tests/clients/node_modules"):
            continue
        bad.append(line)
    return bad


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source", required=True)
    parser.add_argument("--build", required=True)
    parser.add_argument("--keep", action="store_true", help="keep the scratch clone and say where")
    parser.add_argument("--as-written", action="store_true",
                        help="the page's own step counts: leave out the rules that cut them (hours for some pages)")
    parser.add_argument("--skip", metavar="WHY", help="skip the walk (exit 77), saying why")
    parser.add_argument("pages", nargs="+")
    args = parser.parse_args()
    if args.skip:
        print(f"docs walk: skipped: {args.skip}", file=sys.stderr)
        sys.exit(SKIP_CODE)
    self_check()
    build = os.path.abspath(args.build)
    top = tempfile.mkdtemp(prefix="tapegrad-walk-")
    clone, home = os.path.join(top, "clone"), os.path.join(top, "home")
    os.makedirs(clone), os.makedirs(home)
    make_clone(os.path.abspath(args.source), clone)
    os.symlink(build, os.path.join(clone, "build"))
    modules = os.path.join(os.path.abspath(args.source), "tests/clients/node_modules")
    if os.path.isdir(modules):
        os.symlink(modules, os.path.join(clone, "tests/clients/node_modules"))
    env = dict(os.environ, PATH=build + os.pathsep + os.environ.get("PATH", ""), HOME=home)
    version = subprocess.run([os.path.join(build, "tapegrad"), "--version"], capture_output=True, text=True).stdout
    runs = re.search(r"this CPU runs: *([^)]*)\)", version)
    if not runs:
        fail(f"no kernel paths in `tapegrad --version`:\n{version}")
    all_rules = {page: [r for r in rules if not (args.as_written and r.smaller)]
                 for page, rules in page_rules(runs.group(1).split()).items()}
    failures = []
    for page in args.pages:
        rules = all_rules.get(page, [])
        commands = commands_of(os.path.join(clone, page))
        if not commands:
            fail(f"{page} has no command block to walk (```sh, or a transcript of `$ ` lines)")
        t0 = time.time()
        for rule in rules:
            if rule.kind == "before":
                rule.used += 1
                done = subprocess.run(["bash", "-c", rule.pattern], cwd=clone, env=env, capture_output=True, text=True)
                if done.returncode != 0:
                    fail(f"{page}: the walk's own step `{rule.pattern}` failed:\n{done.stdout}{done.stderr}")
        for at, kind, written, expected in commands:
            command, run, must_fail = apply_rules(rules, written)
            if not run:
                print(f"{page}:{at}: left out: {written}", flush=True)
                continue
            shown = command if command == written else f"{command}   (the page: {written})"
            print(f"{page}:{at}: $ {shown}", flush=True)
            t = time.time()
            # stdbuf: stdout line by line, as on a terminal, so that it keeps its order with stderr
            done = subprocess.run(["stdbuf", "-oL", "bash", "-o", "pipefail", "-c", command], cwd=clone, env=env,
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, errors="replace", timeout=900)
            print(f"    exit {done.returncode} after {time.time() - t:.1f} s", flush=True)
            printed = done.stdout
            if (done.returncode != 0) != must_fail:
                tail = "\n".join(printed.split("\n")[-25:])
                failures.append(f"{page}:{at}: `{command}` exited {done.returncode}:\n{tail}")
                break
            if kind == "transcript":
                why = transcript_matches(expected, printed)
                if why:
                    failures.append(f"{page}:{at}: {why}; the program printed:\n{printed}")
        bad = written_outside_checkpoints(clone)
        if bad:
            failures.append(f"{page}: written inside the source tree (not under checkpoints/):\n  " + "\n  ".join(bad))
        print(f"{page}: walked in {time.time() - t0:.0f} s", flush=True)
        for rule in rules if not failures else []:
            if rule.used == 0 and rule.when:
                failures.append(f"{page}: the walk's rule /{rule.pattern}/ ({rule.why}) matches no command: "
                                "update tests/docs_walk.py")
        if failures:
            break
    if args.keep:
        print(f"docs walk: the clone is {clone}")
    else:
        shutil.rmtree(top, ignore_errors=True)
    for f in failures:
        print(f"FAIL {f}", file=sys.stderr)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
