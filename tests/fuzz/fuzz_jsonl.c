/* The JSON Lines reader (data/jsonl.h) and the documents read through it (data/sources.h): any
 * bytes, as a .jsonl file and gzip-compressed as a .jsonl.gz. Every line the reader hands out as an
 * object must be strict JSON that the cursor walks to its end; every line is accounted for (an
 * object, malformed, or empty); and the gzip file must give exactly the documents of the plain one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "data/jsonl.h"
#include "data/sources.h"
#include "fuzz_support.h"

/* Every document of path, concatenated with their lengths; *n documents. */
static char *documents(const char *path, size_t *len, uint64_t *n, uint64_t *malformed) {
    TgSourceList list;
    *len = 0, *n = 0, *malformed = 0;
    if (tg_sources_list(path, &list) != TG_OK) return NULL;
    TgDocReader r;
    TgDocOptions opt = {.text_field = "text", .whole_documents = true};
    tg_doc_reader_open(&r, &list, &opt);
    char *out = NULL;
    for (;;) {
        TgDocPiece p;
        bool got;
        if (tg_doc_reader_next(&r, &p, &got) != TG_OK || !got) break;
        if (!p.doc_end || p.len == 0) abort(); /* a JSONL document is one piece, never empty */
        out = realloc(out, *len + p.len + sizeof(size_t));
        memcpy(out + *len, &p.len, sizeof(size_t));
        memcpy(out + *len + sizeof(size_t), p.text, p.len);
        *len += p.len + sizeof(size_t);
    }
    *n = r.documents, *malformed = r.malformed_lines;
    tg_doc_reader_close(&r);
    tg_sources_free(&list);
    return out;
}

/* The lines as the reader hands them out: each object walked member by member. */
static void walk_lines(const char *path, size_t size) {
    TgJsonlReader r;
    if (tg_jsonl_open(&r, path) != TG_OK) return;
    int64_t last = 0, seen = 0;
    TgJsonlLine line;
    while (tg_jsonl_next(&r, &line) == TG_OK && line.kind != TG_JSONL_END) {
        if (line.number <= last) abort(); /* line numbers grow */
        last = line.number;
        seen++;
        if (line.kind != TG_JSONL_OBJECT) continue;
        if (line.text[line.len] != '\0' || memchr(line.text, '\n', line.len)) abort();
        TgJsonCursor c = tg_json_cursor(line.text, line.len, 0);
        tg_json_skip(&c);
        while (c.pos < c.len && strchr(" \t\r", c.text[c.pos])) c.pos++;
        if (c.pos != line.len) abort(); /* the object is the whole line */
        TgJsonString value;
        char why[256];
        if (tg_jsonl_string_member(&line, "conversations", &value, why, sizeof why)) {
            char *out = malloc(value.raw_len + 1);
            tg_json_decode(value, out);
            free(out);
        }
    }
    if (seen + r.empty_lines != r.line_no) abort(); /* every line accounted for */
    if ((size_t)r.line_no > size + 1) abort();
    tg_jsonl_close(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *plain = fuzz_write("data.jsonl", data, size);
    char plain_path[1024];
    snprintf(plain_path, sizeof plain_path, "%s", plain);
    walk_lines(plain_path, size);
    char gz_path[1024];
    snprintf(gz_path, sizeof gz_path, "%s/data.jsonl.gz", fuzz_scratch());
    gzFile f = gzopen(gz_path, "wb");
    if (!f) abort();
    if (size && gzwrite(f, data, (unsigned)size) != (int)size) abort();
    gzclose(f);
    size_t la, lb;
    uint64_t na, nb, ma, mb;
    char *a = documents(plain_path, &la, &na, &ma), *b = documents(gz_path, &lb, &nb, &mb);
    if (la != lb || na != nb || ma != mb || (la && memcmp(a, b, la) != 0)) abort();
    free(a), free(b);
    fuzz_remove("data.jsonl.gz");
    return 0;
}
