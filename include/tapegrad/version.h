/* The version of tapegrad and of every file format it writes, in one place.
 *
 * TG_VERSION_* are the headers' version (CMake reads them from here for the library's
 * version, its SONAME and the pkg-config and CMake package files); tg_version() is the
 * version of the library a program runs with. The API follows semantic versioning from 1.0 on;
 * during 0.x a minor release may change it, and the SONAME (libtapegrad.so.0) stays 0.
 *
 * A format version changes when a file written by the new code cannot be read correctly by the
 * old; a reader refuses versions newer than its own with a message saying so, and reads every
 * older one it lists in its header.
 */
#ifndef TG_VERSION_H
#define TG_VERSION_H

#define TG_VERSION_MAJOR 0
#define TG_VERSION_MINOR 3
#define TG_VERSION_PATCH 0
#define TG_VERSION "0.3.0"
/* 10000 major + 100 minor + patch: for `#if TG_VERSION_NUMBER >= 200` */
#define TG_VERSION_NUMBER \
    (TG_VERSION_MAJOR * 10000 + TG_VERSION_MINOR * 100 + TG_VERSION_PATCH)

/* Checkpoints (*.tgck, checkpoint/checkpoint.h): a model's, and a parameter set's
 * (tapegrad/param_checkpoint.h), which is the same stream with flag bit 1 set. Versions 1 and 2 load. */
#define TG_CHECKPOINT_FORMAT 2
/* tokenizer.txt (tapegrad/tokenizer.h): 2 splits BPE text as the GPT-2/ByteLevel pre-tokenizer does;
 * 3 adds named special tokens (written only by a BPE that has some, others stay version 2);
 * version 1 files (tapegrad's earlier split) load and encode as before. */
#define TG_TOKENIZER_FORMAT 3
/* train.tok / val.tok (data/tokfile.h). */
#define TG_TOKFILE_FORMAT 1

#pragma GCC visibility push(default)

/* "0.3.0": the version of the library linked, which may differ from TG_VERSION (the
 * headers compiled against) when a program runs with another libtapegrad.so.0. */
const char *tg_version(void);

#pragma GCC visibility pop

#endif
