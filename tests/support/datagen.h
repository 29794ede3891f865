/* Helpers for the data suites: generated texts and scratch folders (never downloads). */
#ifndef TAPEGRAD_SUPPORT_DATAGEN_H
#define TAPEGRAD_SUPPORT_DATAGEN_H

#include <stddef.h>
#include <stdint.h>

/* An English-like text of exactly `len` bytes: sentences of common words with capitals,
 * commas, full stops and line breaks, reproducible from `seed`. malloc'ed, NUL-terminated. */
char *datagen_english(uint64_t seed, size_t len);

/* A text of exactly `len` bytes with a large vocabulary, as a real corpus has: words of 1-4
 * syllables from a generated lexicon of 6,000, drawn with Zipf frequencies (the word of rank r
 * has weight 1/r), with capitals, punctuation, numbers and line breaks. A byte-level BPE can
 * learn thousands of merges from it (datagen_english's 120 words allow only a few hundred).
 * Reproducible from `seed`; malloc'ed, NUL-terminated. */
char *datagen_prose(uint64_t seed, size_t len);

/* A fresh folder under $TMPDIR (or /tmp); the returned path is malloc'ed. */
char *datagen_tempdir(void);
/* Removes a folder and everything in it. */
void datagen_remove_tree(const char *path);
/* Writes len bytes to dir/name (creating missing parent folders of name); aborts on failure. */
void datagen_write(const char *dir, const char *name, const void *data, size_t len);
/* dir/name in a malloc'ed string. */
char *datagen_path(const char *dir, const char *name);

#endif
