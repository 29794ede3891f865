#!/usr/bin/env bash
# Installs a built tree into a temporary prefix, then builds the three examples against the
# installed files alone -- copied out of the source tree, so nothing else is in reach -- through
# pkg-config (shared, and custom_op once statically through pkg-config --static) and through
# CMake's find_package(tapegrad) (the shared library, then COMPONENTS static), and runs every
# build: custom_op's check passes and, with --break-backward, fails; mlp reaches its accuracy and
# resumes bitwise; generate continues a prompt from a run the installed `tapegrad` trains on a
# generated text. Then it builds them once more with tapegrad's source tree added as a subproject
# (add_subdirectory), which must build the library alone and give the examples include/ alone.
# usage: examples/check-install.sh [BUILD_DIR]     (default build/, already built)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/tapegrad-install-XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
fail() { echo "check-install: $*" >&2; exit 1; }

echo "== install into $prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
mkdir "$work/src"
cp "$root"/examples/*.c "$root"/examples/CMakeLists.txt "$work/src/"
libdir=$(dirname "$(find "$prefix" -name libtapegrad.so.0)")
export PKG_CONFIG_PATH=$libdir/pkgconfig
export LD_LIBRARY_PATH=$libdir
version=$("$prefix/bin/tapegrad" --version | head -1)
[ "tapegrad $(pkg-config --modversion tapegrad)" = "$version" ] ||
  fail "pkg-config says $(pkg-config --modversion tapegrad), the program '$version'"

echo "== a run for generate: the installed tapegrad on a generated text"
awk 'BEGIN { srand(1); n = split("the a cat dog sat on mat ran to house and then saw big small red old man", w, " ");
             for (i = 0; i < 4000; i++) printf "%s%s", w[int(rand() * n) + 1], i % 12 == 11 ? ".\n" : " " }' \
  > "$work/corpus.txt"
"$prefix/bin/tapegrad" train --preset tiny --steps 20 --batch 4 --threads 1 --eval-batches 2 --sample-tokens 0 \
  --data "$work/corpus.txt" --out "$work/run" >"$work/train.log" 2>&1 || { cat "$work/train.log"; fail "training failed"; }

# runs the three examples built into folder $1, which load the shared library $2 (or, with
# "static", none)
run_examples() {
  local bin=$1 lib=$2 out
  "$bin/custom_op" >/dev/null || fail "$bin/custom_op: its gradient check did not pass"
  if out=$("$bin/custom_op" --break-backward 2>&1); then fail "$bin/custom_op --break-backward passed its check"; fi
  grep -q "gradcheck FAILED: swish" <<<"$out" || fail "$bin/custom_op --break-backward did not name the failure: $out"
  "$bin/mlp" "$work/mlp-$(basename "$bin").tgck" >/dev/null || fail "$bin/mlp failed"
  out=$("$bin/generate" "$work/run" "the " 40 2>"$work/generate.err") || fail "$bin/generate: $(cat "$work/generate.err")"
  [[ "$out" == "the "?????* ]] || fail "$bin/generate did not continue the prompt: '$out'"
  if [ "$lib" = static ]; then
    [[ "$(ldd "$bin/mlp")" != *libtapegrad* ]] || fail "$bin/mlp, linked statically, loads libtapegrad.so"
  else
    [[ "$(ldd "$bin/mlp")" == *"$lib"* ]] || fail "$bin/mlp does not load $lib"
  fi
  echo "   $bin: custom_op (passes; fails when broken), mlp, generate: ok"
}

echo "== pkg-config: $(pkg-config --cflags --libs tapegrad)"
mkdir "$work/pc"
for example in custom_op mlp generate; do
  cc -std=c11 -Wall -Wextra -Werror $(pkg-config --cflags tapegrad) "$work/src/$example.c" -o "$work/pc/$example" \
    $(pkg-config --libs tapegrad) -lm
done
run_examples "$work/pc" "$libdir/libtapegrad.so.0"
# static: the archive and its dependencies as pkg-config --static names them
cc -std=c11 $(pkg-config --cflags tapegrad) "$work/src/custom_op.c" -o "$work/pc/custom_op_static" "$libdir/libtapegrad.a" \
  $(pkg-config --static --libs tapegrad | sed 's/-ltapegrad//') -lm
[[ "$(ldd "$work/pc/custom_op_static")" != *libtapegrad* ]] || fail "the static build links libtapegrad.so"
"$work/pc/custom_op_static" >/dev/null || fail "the static custom_op failed"
echo "   static custom_op: ok"

echo "== find_package(tapegrad)"
cmake -S "$work/src" -B "$work/cm" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_FLAGS="-Wall -Wextra -Werror" >/dev/null
cmake --build "$work/cm" -j2 >/dev/null
# CMake's build RPATH names the installed library: no LD_LIBRARY_PATH needed
unset LD_LIBRARY_PATH
run_examples "$work/cm" "$libdir/libtapegrad.so.0"
echo "== find_package(tapegrad COMPONENTS static)"
cmake -S "$work/src" -B "$work/cm-static" -DCMAKE_PREFIX_PATH="$prefix" -DTAPEGRAD_EXAMPLES_STATIC=ON \
  -DCMAKE_C_FLAGS="-Wall -Wextra -Werror" >/dev/null
cmake --build "$work/cm-static" -j2 >/dev/null
run_examples "$work/cm-static" static

# add_subdirectory: the examples' own project adds tapegrad's source tree (-DTAPEGRAD_SOURCE_TREE)
echo "== add_subdirectory(tapegrad's source tree)"
cmake -S "$work/src" -B "$work/sub" -DTAPEGRAD_SOURCE_TREE="$root" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DCMAKE_C_FLAGS="-Wall -Wextra -Werror" >/dev/null
cmake --build "$work/sub" -j2 >/dev/null
# a subproject builds the library alone: no program, test, benchmark or layer check unless asked
built=$(cd "$work/sub/tapegrad" && ls -d tapegrad tapegrad-faults cli tests bench examples layer_check test_* ./*_bench 2>/dev/null | tr '\n' ' ' || true)
[ -z "$built" ] || fail "the subproject built what it must not unless asked: $built"
# the examples see include/ alone: no internal header of the source tree is in reach
includes=$(grep -F '"command"' "$work/sub/compile_commands.json" | grep -F "$work/src/mlp.c" | grep -o -E -- '-(I|isystem ?)[^ "]+' | sort -u | tr '\n' ' ' || true)
[ "$includes" = "-I$root/include " ] || fail "the examples' include path is '$includes', not -I$root/include alone"
run_examples "$work/sub" "$work/sub/tapegrad/libtapegrad.so.0"
echo "check-install: the installed library and the source tree as a subproject build and run every example"
