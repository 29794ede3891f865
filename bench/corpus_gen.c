/* Writes a generated corpus of a given size to stdout, for bench/prepare_bench.sh: documents of
 * English-like prose over a Zipf-distributed lexicon of 60,000 generated words, with records of
 * Debian's fortunes (when --fortunes DIR is given) mixed in, a few of their words replaced, so that
 * a large corpus keeps meeting new text. As plain text (documents separated by a blank line) or as
 * JSON Lines ({"text": ...}, every third document wrapped in <|im_start|> ... <|im_end|> as
 * MiniMind's pretraining set is). Reproducible from --seed.
 *
 * --distinct words|letters writes instead the worst case of BPE training, text whose chunks are
 * all distinct: words of 4 to 12 random letters, 12 to a line, or random letters without a space
 * or a line break (one chunk).
 *
 * usage: corpus_gen --bytes N [--seed S] [--jsonl] [--fortunes DIR] [--distinct words|letters] > FILE */
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { LEXICON = 60000 };

static uint64_t rng_state;
static uint64_t next_u64(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double uniform(void) { return (double)(next_u64() >> 11) / 9007199254740992.0; }
static size_t below(size_t n) { return (size_t)(uniform() * (double)n); }

static char *words[LEXICON];
static double cumulative[LEXICON];
static char **records;
static size_t n_records;

static void make_lexicon(void) {
    static const char *onsets[] = {"b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w",
                                   "br", "ch", "cl", "dr", "fl", "gr", "pl", "pr", "sh", "st", "th", "tr", ""};
    static const char *nuclei[] = {"a", "e", "i", "o", "u", "ai", "ea", "ee", "oo", "ou", "y"};
    static const char *codas[] = {"", "", "n", "r", "s", "t", "l", "nd", "st", "ng", "ck", "m"};
    double total = 0;
    for (int i = 0; i < LEXICON; i++) {
        char w[64] = "";
        int syllables = 1 + (int)below(i < 200 ? 2 : 4);
        for (int s = 0; s < syllables; s++) {
            strcat(w, onsets[below(sizeof onsets / sizeof *onsets)]);
            strcat(w, nuclei[below(sizeof nuclei / sizeof *nuclei)]);
            strcat(w, codas[below(sizeof codas / sizeof *codas)]);
        }
        words[i] = strdup(w);
        total += 1.0 / (i + 1.0);
        cumulative[i] = total;
    }
    for (int i = 0; i < LEXICON; i++) cumulative[i] /= total;
}

static const char *zipf_word(void) {
    double u = uniform();
    size_t lo = 0, hi = LEXICON - 1;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cumulative[mid] < u) lo = mid + 1;
        else hi = mid;
    }
    return words[lo];
}

/* The records of every fortune file (separated by lines holding "%"). */
static void read_fortunes(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (e->d_name[0] == '.' || (n > 4 && !strcmp(e->d_name + n - 4, ".dat")) || (n > 3 && !strcmp(e->d_name + n - 3, ".u8")))
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        char *line = NULL, *rec = NULL;
        size_t cap = 0, len = 0;
        ssize_t got;
        while ((got = getline(&line, &cap, f)) >= 0) {
            if (strcmp(line, "%\n") == 0) {
                if (len) {
                    records = realloc(records, (n_records + 1) * sizeof *records);
                    records[n_records++] = rec;
                }
                rec = NULL, len = 0;
                continue;
            }
            rec = realloc(rec, len + (size_t)got + 1);
            memcpy(rec + len, line, (size_t)got + 1);
            len += (size_t)got;
        }
        free(line), free(rec);
        fclose(f);
    }
    closedir(d);
}

typedef struct {
    char *b;
    size_t len, cap;
} Buf;

static void put(Buf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        b->cap = (b->len + n + 1) * 2;
        b->b = realloc(b->b, b->cap);
    }
    memcpy(b->b + b->len, s, n);
    b->len += n;
}
static void puts_(Buf *b, const char *s) { put(b, s, strlen(s)); }

static void sentence(Buf *b) {
    int n = 4 + (int)below(18);
    for (int i = 0; i < n; i++) {
        const char *w = zipf_word();
        if (i == 0) {
            char c = (char)(w[0] - 32);
            put(b, &c, 1);
            puts_(b, w + 1);
        } else {
            puts_(b, " ");
            if (uniform() < 0.02) {
                char num[24];
                snprintf(num, sizeof num, "%u", (unsigned)below(100000));
                puts_(b, num);
                puts_(b, " ");
            }
            puts_(b, w);
        }
        if (i + 1 < n && uniform() < 0.08) puts_(b, ",");
    }
    puts_(b, uniform() < 0.1 ? "?" : ".");
}

/* A fortune record with one word in twelve swapped for a lexicon word. */
static void fortune(Buf *b) {
    const char *r = records[below(n_records)];
    while (*r) {
        size_t n = strcspn(r, " \n\t");
        if (n > 0 && uniform() < 1.0 / 12) puts_(b, zipf_word());
        else put(b, r, n);
        r += n;
        size_t s = strspn(r, " \n\t");
        put(b, r, s);
        r += s;
    }
}

static void document(Buf *b) {
    int paragraphs = 1 + (int)below(8);
    for (int p = 0; p < paragraphs; p++) {
        if (p) puts_(b, "\n");
        if (n_records && uniform() < 0.2) {
            fortune(b);
            continue;
        }
        int s = 1 + (int)below(6);
        for (int i = 0; i < s; i++) {
            if (i) puts_(b, " ");
            sentence(b);
        }
        puts_(b, "\n");
    }
}

static void json_string(Buf *out, const char *s, size_t n) {
    puts_(out, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        if (c == '"' || c == '\\') snprintf(esc, sizeof esc, "\\%c", c);
        else if (c == '\n') snprintf(esc, sizeof esc, "\\n");
        else if (c == '\t') snprintf(esc, sizeof esc, "\\t");
        else if (c < 0x20) snprintf(esc, sizeof esc, "\\u%04x", c);
        else {
            put(out, (const char *)&c, 1);
            continue;
        }
        puts_(out, esc);
    }
    puts_(out, "\"");
}

/* --distinct: n bytes of random letters, as words (spaces, a line break after every twelfth) or not. */
static void distinct(unsigned long long n, int words) {
    unsigned long long written = 0, k = 0;
    char buf[1 << 16];
    size_t len = 0;
    while (written < n) {
        size_t w = words ? 4 + below(9) : sizeof buf;
        for (size_t i = 0; i < w && written < n; i++, written++) {
            buf[len++] = (char)('a' + below(26));
            if (len == sizeof buf) fwrite(buf, 1, len, stdout), len = 0;
        }
        if (words && written < n) {
            buf[len++] = ++k % 12 == 0 ? '\n' : ' ';
            written++;
            if (len == sizeof buf) fwrite(buf, 1, len, stdout), len = 0;
        }
    }
    fwrite(buf, 1, len, stdout);
}

int main(int argc, char **argv) {
    unsigned long long bytes = 0, seed = 1;
    int jsonl = 0, distinct_words = -1;
    const char *fortunes = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--bytes") && i + 1 < argc) bytes = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--fortunes") && i + 1 < argc) fortunes = argv[++i];
        else if (!strcmp(argv[i], "--jsonl")) jsonl = 1;
        else if (!strcmp(argv[i], "--distinct") && i + 1 < argc && (!strcmp(argv[i + 1], "words") || !strcmp(argv[i + 1], "letters")))
            distinct_words = !strcmp(argv[++i], "words");
        else {
            fprintf(stderr, "usage: corpus_gen --bytes N [--seed S] [--jsonl] [--fortunes DIR] [--distinct words|letters] > FILE\n");
            return 2;
        }
    }
    rng_state = seed;
    if (distinct_words >= 0) {
        distinct(bytes, distinct_words);
        return 0;
    }
    make_lexicon();
    if (fortunes) read_fortunes(fortunes);
    Buf doc = {0}, line = {0};
    unsigned long long written = 0, k = 0;
    while (written < bytes) {
        doc.len = line.len = 0;
        document(&doc);
        Buf *out = &doc;
        if (jsonl) {
            puts_(&line, "{\"text\": ");
            if (k % 3 == 0) {
                Buf wrapped = {0};
                puts_(&wrapped, "<|im_start|>");
                put(&wrapped, doc.b, doc.len);
                puts_(&wrapped, "<|im_end|>");
                json_string(&line, wrapped.b, wrapped.len);
                free(wrapped.b);
            } else {
                json_string(&line, doc.b, doc.len);
            }
            puts_(&line, "}\n");
            out = &line;
        } else {
            puts_(&doc, "\n");
        }
        size_t n = out->len;
        if (written + n > bytes) n = (size_t)(bytes - written);
        if (!jsonl || n == out->len) fwrite(out->b, 1, n, stdout); /* a JSONL corpus ends on a whole line */
        written += jsonl && n != out->len ? n : n;
        if (jsonl && n != out->len) break;
        k++;
    }
    return 0;
}
